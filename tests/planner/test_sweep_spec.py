"""The grid sweep's speculative axis (planner.sweep_spec, planner.screen) and its simulated tier (planner.sweep_sims).

Expected values: the plan's own speculative pricing (planner.whatif.Evaluator.at with the speculative what-if, on a
scenario built from names at the point's layout and lengths), perfmodel.predict for the setting "off", and
simulate.simulate called directly for a simulated point. No wall-clock assertion.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario, predict
from servescope.perfmodel.speculative import iteration
from servescope.planner import screen as screen_mod
from servescope.planner.screen import Grid, screen_grid
from servescope.planner.sweep import Simulated, Sla
from servescope.planner.sweep_grid import classes, exact_at, grid_sweep, screen_error
from servescope.planner.sweep_sims import SIM_WAVES, sim_requests
from servescope.planner.sweep_spec import (
    SpecSetting,
    exact_spec,
    fixed_affine,
    parse_specs,
    pricing,
)
from servescope.planner.whatif import Evaluator, PerfModel, SpecSetup, WhatIf
from servescope.simulate import simulate

MODEL, GPU = "qwen3.5-35b-a3b", "h100_sxm"  # MoE with one MTP layer and a bundled MTP acceptance curve
SPECS = parse_specs("off,mtp:1,mtp:3")
GRID = Grid(2, True, (1, 8, 64, 450), (128, 300, 512, 1000, 2048, 3000, 6000), (64, 200, 256, 1024, 1500, 4000),
            ("base",), SPECS)
Q = ("tpot_s", "ttft_s", "output_tok_s")


@pytest.fixture(scope="module")
def base() -> Scenario:
    return Scenario.build(model=MODEL, gpu=GPU, tp=1)


@pytest.fixture(scope="module")
def screened(base: Scenario) -> screen_mod.Screened:
    return screen_grid(base, GRID)


def _named(cfg: screen_mod.Config, isl: int, osl: int) -> Scenario:
    return Scenario.build(model=MODEL, gpu=GPU, tp=cfg.layout.tp, ep=cfg.layout.ep, dp=cfg.layout.dp, isl=isl,
                          osl=osl)


def test_parse_and_refusals(base: Scenario) -> None:
    assert parse_specs(None) == (SpecSetting(),)
    assert [s.label() for s in parse_specs("off, MTP:2,eagle3:3,mtp:2")] == ["off", "mtp:2", "eagle3:3"]
    for bad in ("mtp", "mtp:0", "medusa:2", ","):
        with pytest.raises(ScenarioError):
            parse_specs(bad)
    with pytest.raises(ScenarioError, match="no MTP layers"):
        pricing(Scenario.build(model="qwen3-30b-a3b", gpu=GPU, tp=1), SpecSetting("mtp", 1))
    with pytest.raises(ScenarioError, match="no bundled acceptance"):
        pricing(base, SpecSetting("eagle3", 2))
    with pytest.raises(ScenarioError, match="exceeds"):
        pricing(base, SpecSetting("mtp", 9))  # the curve has 8 positions


def test_configs_cross_the_axis_and_skip_what_cannot_be_priced(base: Scenario) -> None:
    g = Grid(2, True, (1,), (128,), (64,), ("base",), parse_specs("off,mtp:2,eagle3:2"))
    cfgs, skipped = screen_mod.configs(base, g)
    assert g.size == 4 * 3
    assert [c.setting.label() for c in cfgs] == ["off"] * 4 + ["mtp:2"] * 4  # layouts fastest, then the setting
    assert len(skipped) == 4 and all("eagle3:2: no bundled acceptance" in s for s in skipped)


def test_exact_tier_is_the_plans_speculative_pricing(screened: screen_mod.Screened) -> None:
    checked = 0
    for cfg in screened.configs:
        if cfg.spec is None:
            continue
        for isl, osl in ((300, 1024), (3000, 64)):
            sc = _named(cfg, isl, osl)
            ev = Evaluator(PerfModel(), sc)
            w = WhatIf("speculative_decoding", spec=SpecSetup(cfg.spec.shape, cfg.spec.al, cfg.spec.shape.method))
            cap = ev.max_concurrency(sc)
            concs = [c for c in GRID.concurrency if c <= cap]
            got = exact_spec(sc, cfg.spec, concs)
            want = [ev.at((w,), c).tpot_s for c in concs]
            np.testing.assert_allclose(got["tpot_s"], want, rtol=1e-12)
            off = predict(sc, concs)
            assert all(got["tpot_s"][j] != off[j].tpot_s for j in range(len(concs)))  # the setting changes TPOT
            checked += len(concs)
    assert checked >= 16


def test_ttft_waits_for_one_iteration_instead_of_one_step(base: Scenario) -> None:
    # at c = 1 nothing queues and no prompt lands in the decode steps: TTFT = prefill + the running step, so the
    # setting moves TTFT by exactly (iteration − plain step) and TPOT is iteration / AL
    p = pricing(base, SpecSetting("mtp", 2))
    assert p is not None
    for isl, osl in ((256, 128), (4096, 1024)):
        sc = base.with_(isl=isl, osl=osl)
        ev = Evaluator(PerfModel(), sc)
        it = ev.iteration(SpecSetup(p.shape, p.al, "mtp"), sc, 1).total_s
        off, on = predict(sc, [1])[0], exact_spec(sc, p, [1])
        assert on["tpot_s"][0] == pytest.approx(it / p.al, rel=1e-12)
        assert on["ttft_s"][0] - off.ttft_s == pytest.approx(it - off.step_time_s, rel=1e-9)
        assert on["output_tok_s"][0] == pytest.approx(osl / (on["ttft_s"][0] + (osl - 1) * on["tpot_s"][0]),
                                                      rel=1e-12)


def test_an_engine_whose_speculative_graphs_stop_at_a_batch() -> None:
    # SGLang 0.4 replays speculative graphs only up to 32 sequences and runs eagerly above: the screen's anchors on
    # both sides of 32 still give the exact tier's numbers, and the exact tier is the plan's pricing there too
    base = Scenario.build(model=MODEL, gpu=GPU, tp=1, backend="sglang", engine_version="0.4.4")
    assert base.engine.speculative.graph_max_batch == 32
    g = Grid(2, True, (1, 16, 32, 33, 64), (256, 2048), (128, 1024), ("base",), parse_specs("mtp:2"))
    s = screen_grid(base, g)
    idx = np.flatnonzero(s.on_anchor)
    e = exact_at(s, idx)
    for q in Q:
        np.testing.assert_allclose(s.values[q][idx], e[q], rtol=1e-9)
    cfg = s.configs[0]
    sc = cfg.scenario.with_(isl=256, osl=128)
    ev = Evaluator(PerfModel(), sc)
    w = WhatIf("speculative_decoding", spec=SpecSetup(cfg.spec.shape, cfg.spec.al, "mtp"))
    got = exact_spec(sc, cfg.spec, [32, 33])["tpot_s"]
    np.testing.assert_allclose(got, [ev.at((w,), c).tpot_s for c in (32, 33)], rtol=1e-12)


def test_accepted_length_is_the_bundled_curves(base: Scenario) -> None:
    from servescope.planner.speculative import bundled_acceptance

    acc = bundled_acceptance(base.model.name, "mtp")
    assert acc is not None
    for k in (1, 3):
        p = pricing(base, SpecSetting("mtp", k))
        assert p is not None and p.al == pytest.approx(1.0 + sum(acc.positions[:k]), rel=1e-12)


def test_fixed_part_is_affine_in_the_batch(base: Scenario) -> None:
    p = pricing(base, SpecSetting("mtp", 3))
    assert p is not None
    a, b = fixed_affine(base, p.drafter(base), p)

    def zero(_s: Scenario, _b: int, _t: int) -> tuple[float, float]:
        return 0.0, 0.0

    for batch in (1, 37, 900):
        assert iteration(base, p.drafter(base), batch, p.shape, zero).fixed_s == pytest.approx(a + b * batch,
                                                                                               rel=1e-12)


def test_screen_is_the_speculative_closed_form_at_its_anchors(screened: screen_mod.Screened) -> None:
    spec = screened.spec
    assert spec.sum() == 2 * 4 * GRID.per_config  # mtp:1 and mtp:3 on every layout
    idx = np.flatnonzero(screened.on_anchor & spec)
    assert idx.size > 0
    e = exact_at(screened, idx)
    for q in Q:
        np.testing.assert_allclose(screened.values[q][idx], e[q], rtol=1e-9)


def test_screen_error_on_the_new_axis_is_measured_and_bounds_it(screened: screen_mod.Screened) -> None:
    err = screen_error(screened, sample=10**6)  # every held-out point of every class
    members = classes(screened)
    assert set(err.sample) == {"within_slots", "past_slots", "spec_within_slots", "spec_past_slots"}
    for name in ("spec_within_slots", "spec_past_slots"):
        held = np.flatnonzero(members[name] & ~screened.on_anchor)
        assert err.sample[name] == held.size > 0
        e = exact_at(screened, held)
        rel = np.array([np.abs(screened.values[q][held] / e[q] - 1.0) for q in Q])
        np.testing.assert_allclose([err.max_rel[name][q] for q in Q], rel.max(axis=1), rtol=1e-9)
        assert rel.max() < 0.05  # the iteration's steps are near-affine between anchors, as the plain step's
        assert all(err.margin[name][q] >= rel[k].max() for k, q in enumerate(Q))
    m = err.at(members)
    j = int(np.flatnonzero(members["spec_past_slots"])[0])
    assert m["tpot_s"][j] == err.margin["spec_past_slots"]["tpot_s"]


def test_optimum_over_settings_is_found_and_speculative_points_are_not_simulated(
        screened: screen_mod.Screened, base: Scenario) -> None:
    ttft_max, tpot_max = 1.0, 0.008
    out = grid_sweep(base, GRID, Sla(ttft_max, tpot_max), simulate_max=None, run=_fake_run)
    near = {(p.layout, p.spec, p.isl, p.osl, p.concurrency): p for p in out.points}
    e = exact_at(screened, np.arange(screened.values["tpot_s"].size))
    best: dict[tuple[int, int], tuple[float, tuple[object, ...]]] = {}
    for i in range(screened.values["tpot_s"].size):  # brute force over layouts × settings × concurrencies
        cfg, isl, osl, c = screened.where(i)
        if e["tpot_s"][i] <= tpot_max and e["ttft_s"][i] <= ttft_max and e["output_tok_s"][i] > best.get(
                (isl, osl), (-1.0, ()))[0]:
            best[(isl, osl)] = (float(e["output_tok_s"][i]), (cfg.layout, cfg.setting.label(), isl, osl, c))
    assert len(best) >= 10 and any(k[1] != "off" for _, k in best.values())  # speculation wins some workloads
    for tok, key in best.values():
        p = near[key]
        assert p.best and p.output_tok_s == pytest.approx(tok, rel=1e-9)
    assert all((p.simulated is None) == (p.spec != "off") for p in out.points)  # every plain near point simulated
    assert any("speculative setting not simulated" in n for n in out.notes)


def _fake_run(sc: Scenario, c: int) -> object:
    class R:  # what SimTask reads of a SimResult
        requests = c

        class ttft:  # noqa: N801
            mean_s = p99_s = sc.isl * 1e-5

        class tpot:  # noqa: N801
            mean_s = p99_s = 1e-3

        output_tok_s = float(c)

    return R()


def test_simulated_point_is_a_plain_simulate_and_workers_change_nothing(base: Scenario) -> None:
    g = Grid(2, True, (1, 16), (256, 2048), (128,), ("base", "native"))  # base is native here: equal scenarios
    one = grid_sweep(base, g, Sla(tpot_max_s=0.02), simulate_max=None)
    two = grid_sweep(base, g, Sla(tpot_max_s=0.02), simulate_max=None, workers=2)
    assert one == two
    sims = [p for p in one.points if p.simulated is not None]
    assert one.simulated == len(sims) == len(one.points) > 0
    assert one.runs < one.simulated  # the "native" twin of each "base" point ran once
    p = sims[0]
    sc = Scenario.build(model=MODEL, gpu=GPU, tp=p.layout.tp, ep=p.layout.ep, dp=p.layout.dp, isl=p.isl, osl=p.osl)
    r = simulate(sc, "closed", p.concurrency, sim_requests(p.concurrency))
    assert p.simulated.requests == SIM_WAVES * p.concurrency
    assert p.simulated == Simulated(r.requests, r.ttft.mean_s, r.ttft.p99_s, r.tpot.mean_s, r.tpot.p99_s,
                                    r.output_tok_s, Sla(tpot_max_s=0.02).met(r.ttft.mean_s, r.tpot.mean_s))


def test_cli_spec_axis_all_simulated_with_workers() -> None:
    args = ["sweep", "--model", MODEL, "--gpu", GPU, "--gpus", "2", "--concurrency", "1,64", "--isls", "256,2048",
            "--osls", "128", "--spec", "off,mtp:2", "--tpot-max", "20", "--simulate-max", "all", "--workers", "2",
            "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "servescope.sweep_grid/2" and doc["axes"]["spec"] == ["off", "mtp:2"]
    assert doc["grid_points"] == 4 * 2 * 2 * 2 * 1
    assert {p["spec"] for p in doc["points"]} <= {"off", "mtp:2"}
    assert all(("simulated" in p) == (p["spec"] == "off") for p in doc["points"])
    bad = CliRunner().invoke(main, [*args[:-7], "--spec", "mtp:x"])
    assert bad.exit_code == 1 and bad.output.count("\n") == 1 and "--spec" in bad.output
