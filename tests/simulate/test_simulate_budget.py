"""Budgets before allocation for the simulation (issue 21 part 1): the run's memory is estimated from what is known
before it starts and refused in one line above the limit; step tables stop at the largest step a run can reach.
A refusal is asserted as work not done (no lengths drawn, no workload built, no run started), never as seconds: the
time budgets are in bench/bench_budgets.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import numpy as np
import pytest
from click.testing import CliRunner

import servescope.simulate as sim_package
from servescope.cli import main
from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario
from servescope.simulate import budget as sim_budget
from servescope.simulate import engine_for, simulate, simulate_points
from servescope.simulate.stepcost import StepCost

SMALL = dict(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=256, osl=64)
CLI = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--isl", "256", "--osl", "64"]
CLI_DEFAULT_LENGTHS = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]  # 1024 + 512, as in the issue


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(**SMALL)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the per-request steps of a run that began (lengths drawn, workload built, loop run, a point of
    simulate_points simulated), recorded as they are called; each still does its work."""
    calls: list[str] = []
    for name in ("draw_lengths", "build_workload", "simulate_raw", "simulate"):
        real = getattr(sim_package, name)
        monkeypatch.setattr(sim_package, name, lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    yield calls


def test_a_billion_request_burst_is_refused_before_any_array(sc: Scenario, started: list[str]) -> None:
    with pytest.raises(ScenarioError, match=r"simulating 1,000,000,000 requests .* would need ~[\d,.]+ GB of memory, "
                                            r"above the limit of 8\.6 GB"):
        simulate(sc, "burst:1000000000")
    assert started == []  # no per-request array: the lengths were never drawn


def test_the_limit_is_the_callers(sc: Scenario) -> None:
    simulate(sc, "closed", 4, 20)  # well under the default
    with pytest.raises(ScenarioError, match=r"above the limit of 1 MB \(the memory available\)"):
        simulate(sc, "closed", 4, 2000, memory_limit_bytes=1_000_000)
    assert sim_budget.limit_for(None) == sim_budget.limit_for(1 << 50) == sim_budget.DEFAULT_LIMIT_BYTES
    assert sim_budget.limit_for(123) == 123


def test_every_point_is_checked_before_the_first_runs(sc: Scenario, started: list[str]) -> None:
    with pytest.raises(ScenarioError, match="simulating 4,000,000 requests"):
        simulate_points(sc.with_(isl=1024, osl=512), [1, 16, 1_000_000])
    assert started == []  # neither the c=1 nor the c=16 point ran before the refusal
    done: list[int] = []
    simulate_points(sc, [1, 2], progress=done.append)
    assert done == [1, 2]
    assert started.count("simulate") == started.count("simulate_raw") == 2  # the recorder sees the runs


def test_estimate_is_within_a_factor_of_what_a_run_holds(sc: Scenario) -> None:
    """The estimate is of the right size: a run's pooled gaps alone are 8 bytes per output token."""
    res = simulate(sc, "closed", 8, 400)
    shape = sim_budget.run_shape(400, 256, 64, 320, 8, 1024, 8192, 1)
    tokens = 400 * 63
    assert 8 * tokens < shape.bytes() < 8 * tokens * 200
    assert res.requests == 400


def test_huge_max_num_seqs_and_budget_give_the_same_run(sc: Scenario) -> None:
    """Step tables stop at the largest reachable step: a billion-sequence cap is the same run as a cap at the
    request count (it used to allocate 7.45 GiB tables). The same up to the prefill-chunk grid, which spans the
    budget geometrically: a measured attention curve interpolated on a coarser grid moves times by < 1e-3."""
    for knob in ("max_num_seqs", "max_num_batched_tokens"):
        huge = simulate(sc, "burst:40", engine=engine_for(sc, **{knob: 1_000_000_000}))
        same = simulate(sc, "burst:40", engine=engine_for(sc, **{knob: 40 * 320 if knob != "max_num_seqs" else 40}))
        a, b = asdict(huge), asdict(same)
        a.pop("settings", None), b.pop("settings", None)
        a.pop("samples", None), b.pop("samples", None)  # per-request arrays: their Stats (boundaries) are compared
        assert _flat(a).keys() == _flat(b).keys(), knob
        for key, value in _flat(a).items():
            want = _flat(b)[key]
            assert (value == pytest.approx(want, rel=1e-3) if isinstance(value, float) else value == want), (knob, key)


def _flat(d: object, prefix: str = "") -> dict[str, object]:
    """Nested dicts and lists as {path: leaf}."""
    if isinstance(d, dict):
        return {k: v for key, val in d.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    if isinstance(d, (list, tuple)):
        return {k: v for i, val in enumerate(d) for k, v in _flat(val, f"{prefix}{i}.").items()}
    return {prefix: d}


def test_step_table_clamp_keeps_every_reachable_value(sc: Scenario) -> None:
    cfg = engine_for(sc)
    full = StepCost(sc, cfg, 8193, 400)
    short = StepCost(sc, cfg, 8193, 400, table_tokens=300)
    assert len(short.tok_dec_s) == 301 and len(full.tok_dec_s) == 8194
    np.testing.assert_array_equal(short.tok_dec_s, full.tok_dec_s[:301])
    np.testing.assert_array_equal(short.pf_n, full.pf_n)  # the chunk grid still spans the budget
    ctx = np.array([100.0, 200.0])
    assert short.step_s(ctx, np.array([64]), np.array([0])) == full.step_s(ctx, np.array([64]), np.array([0]))


@pytest.mark.parametrize("args", [
    ["simulate", *CLI, "--arrival", "burst:1000000000"],
    ["simulate", *CLI_DEFAULT_LENGTHS, "--concurrency", "64", "--num-prompts", "1000000"],
    ["model", *CLI_DEFAULT_LENGTHS, "--simulate", "--concurrency", "1,1000000"],
    ["simulate", *CLI, "--max-num-batched-tokens", "1", "--num-prompts", "100000", "--concurrency", "8"],
])
def test_cli_refuses_in_one_line(args: list[str], started: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output[-500:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("servescope: simulating "), lines
    assert "of memory, above the limit of" in lines[0]
    assert not {"draw_lengths", "build_workload", "simulate_raw"} & set(started)  # refused before the run


def test_cli_huge_max_num_seqs_runs() -> None:
    result = CliRunner().invoke(main, ["simulate", *CLI, "--concurrency", "4", "--num-prompts", "20",
                                       "--max-num-seqs", "1000000000", "--json"])
    assert result.exit_code == 0, result.stderr
