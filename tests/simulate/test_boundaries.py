"""TTFT and TPOT by boundary (issue 29.1, simulate/boundaries.py).

Expected values are computed here from the run's raw engine times, a fresh StepCost, the efficiency constants and
the data file read with tomllib — not from the parts themselves:
  TTFT_i = first token (engine) + delivery − sent; prefill_i = first token (engine) − first scheduled;
  mean ITL_i = (last token − first token) / (output tokens − 1);
  host per step = cpu_overhead_s + cpu_overhead_per_seq_s · b; exposed with overlap = f·host + max((1 − f)·host −
  gpu, 0), f = overlap_exposed_frac (docs/simulate.md; perfmodel.combine's formula written out again here).
"""

from __future__ import annotations

import json
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import BadConfig
from servescope.perfmodel import Scenario
from servescope.simulate import engine_for, replay_workload, simulate, simulate_workload
from servescope.simulate.boundaries import (
    TPOT_PARTS,
    TTFT_PARTS,
    rank_wait_from_skew,
    split_requests,
)
from servescope.simulate.loop import RawRun, simulate_raw
from servescope.simulate.stepcost import StepCost
from servescope.specs import serving_boundaries

RTOL, ATOL = 1e-9, 1e-12
DATA = Path(__file__).parent.parent / "data"
TRACES, METRICS = DATA / "traces", DATA / "metrics"


def _sc(backend: str = "vllm", overlap: bool | None = None, **kw: object) -> Scenario:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", backend=backend, isl=512, osl=64, **kw)
    return sc if overlap is None else sc.with_(overlap_scheduler=overlap)


def _data_delivery_s(backend: str) -> float:
    doc = tomllib.loads(resources.files("servescope.specs").joinpath("data", "serving_boundaries.toml")
                        .read_text(encoding="utf-8"))
    return float(doc[backend][-1]["delivery_s"])


def _raw(sc: Scenario, send: np.ndarray, isl: np.ndarray, osl: np.ndarray, cap: int | None = None,
         **knobs: object) -> RawRun:
    return simulate_raw(sc, engine_for(sc, **knobs), replay_workload(send, isl, osl, cap))


def _client(raw: RawRun) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, mean ITL) per request from the raw engine times (module docstring)."""
    ttft = raw.first_token_s + raw.delivery_s - raw.sent_s
    itl = np.where(raw.osl > 1, (raw.finish_s - raw.first_token_s) / np.maximum(raw.osl - 1, 1), np.nan)
    return ttft, itl


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_parts_add_up_to_each_requests_ttft_and_mean_itl(backend: str) -> None:
    rng = np.random.default_rng(3)
    n = 120
    send, isl, osl = np.cumsum(rng.exponential(0.05, n)), rng.integers(30, 2000, n), rng.integers(1, 200, n)
    raw = _raw(_sc(backend), send, isl, osl, 24)
    ttft, itl = _client(raw)
    p = split_requests(raw, ttft, itl)
    assert set(p.ttft) == set(TTFT_PARTS) and set(p.tpot) == set(TPOT_PARTS)
    np.testing.assert_allclose(p.total("ttft"), ttft, rtol=RTOL, atol=ATOL)
    ok = raw.osl > 1
    np.testing.assert_allclose(p.total("tpot")[ok], itl[ok], rtol=RTOL, atol=ATOL)
    assert np.isnan(p.tpot["gpu"][~ok]).all()
    # prefill is the engine's admission → first token; the step sums rebuild the decode time (no stall left)
    np.testing.assert_allclose(p.ttft["prefill"], raw.first_token_s - raw.first_sched_s, rtol=1e-9, atol=1e-9)
    assert np.abs(p.tpot["stall"][ok]).max() < 1e-9
    assert (p.ttft["queue"] >= 0).all() and (p.tpot["gpu"][ok] > 0).all()


def test_front_end_and_delivery_are_charged_once_per_request() -> None:
    sc = _sc()
    isl = np.array([100, 700, 1500])
    osl = np.array([20, 5, 40])
    raw = _raw(sc, np.array([0.0, 10.0, 20.0]), isl, osl)  # far apart: each alone in the engine
    cost = StepCost(sc, engine_for(sc), 8192, 4096)
    d = _data_delivery_s("vllm")
    ttft, itl = _client(raw)
    p = split_requests(raw, ttft, itl)
    np.testing.assert_allclose(p.ttft["delivery"], d)
    np.testing.assert_allclose(p.ttft["front_end"], cost.setup_s - d, rtol=RTOL)
    # alone: TTFT = set-up (front end + delivery, once) + one prefill step of the whole prompt
    expected = [cost.setup_s + cost.step_s(np.zeros(0), np.array([n]), np.array([0])) for n in isl]
    np.testing.assert_allclose(ttft, expected, rtol=1e-9)
    # the delivery shifts the last token as it shifts the first: E2E − TTFT is the engine's decode time
    res = simulate_workload(sc, replay_workload(np.array([0.0, 10.0, 20.0]), isl, osl))
    np.testing.assert_allclose(res.samples["e2e"] - res.samples["ttft"], raw.finish_s - raw.first_token_s,
                               rtol=1e-9, atol=1e-12)


def test_low_load_has_no_queue() -> None:
    n = 30
    send = np.arange(n) * 5.0  # one request every 5 s; each is served in well under a second
    raw = _raw(_sc(), send, np.full(n, 800), np.full(n, 50))
    ttft, itl = _client(raw)
    q = split_requests(raw, ttft, itl).ttft["queue"]
    assert np.abs(q).max() < 1e-9


def test_async_scheduling_hides_the_overlapped_host_time() -> None:
    send, isl, osl = np.array([0.0]), np.array([256]), np.array([200])
    eff = _sc().efficiency
    host = eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * 1  # one sequence per decode step
    parts = {}
    for overlap in (False, True):
        raw = _raw(_sc(overlap=overlap), send, isl, osl)
        ttft, itl = _client(raw)
        parts[overlap] = (split_requests(raw, ttft, itl), itl[0])
    off, on = parts[False][0].tpot, parts[True][0].tpot
    gpu = off["gpu"][0]
    np.testing.assert_allclose(on["gpu"][0], gpu, rtol=1e-12)  # the same steps on the GPU
    np.testing.assert_allclose([off["host"][0], on["host"][0]], host, rtol=1e-9)
    f = eff.overlap_exposed_frac
    exposed = f * host + max((1 - f) * host - gpu, 0.0)
    assert off["overlap"][0] == pytest.approx(0.0, abs=1e-15)
    assert on["overlap"][0] == pytest.approx(host - exposed, rel=1e-6)
    assert on["overlap"][0] > 0  # the engine's default hides part of the host gap
    # the mean ITL falls by exactly the overlapped part
    assert parts[False][1] - parts[True][1] == pytest.approx(on["overlap"][0], rel=1e-6)


def test_a_measured_rank_wait_replaces_the_models() -> None:
    sc = _sc(overlap=False)
    send, isl, osl = np.array([0.0, 0.0]), np.array([300, 600]), np.array([80, 80])
    w = 0.7e-3
    base = _raw(sc, send, isl, osl)
    meas = _raw(sc, send, isl, osl, rank_wait_s=w)
    pb, pm = (split_requests(r, *_client(r)) for r in (base, meas))
    assert np.all(pb.tpot["rank_wait"] == 0.0)  # dp = 1: the model has no rank to wait for
    np.testing.assert_allclose(pm.tpot["rank_wait"], w, rtol=1e-9)
    np.testing.assert_allclose(pm.tpot["gpu"], pb.tpot["gpu"], rtol=1e-9)
    np.testing.assert_allclose(_client(meas)[1] - _client(base)[1], w, rtol=1e-6)
    assert pm.sources["rank_wait"].startswith("trace")


def test_attention_dp_waits_for_the_busiest_rank() -> None:
    sc = _sc(dp=2)
    cost = StepCost(sc, engine_for(sc), 8192, 4096)
    ctx = np.array([400.0, 500.0, 600.0])  # 3 sequences on 2 ranks: one rank runs 2, the other waits
    cost.step_s(ctx, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert cost.last_wait_s == pytest.approx(cost.decode_attention_s(ctx) * (1 - 1.5 / 2))
    cost.step_s(ctx[:2], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert cost.last_wait_s == 0.0  # 2 sequences on 2 ranks: balanced


def test_report_parts_carry_stats_and_sources() -> None:
    res = simulate(_sc(), "closed", 8, 60)
    assert set(res.parts) == set(TTFT_PARTS) | set(TPOT_PARTS)
    assert res.parts["delivery"].mean_s == pytest.approx(_data_delivery_s("vllm"))
    assert all(res.part_sources[k].startswith("model") for k in res.parts)
    total = sum(res.parts[k].mean_s for k in TTFT_PARTS)
    assert total == pytest.approx(res.ttft.mean_s, rel=1e-9)  # means add up too


def test_bad_boundaries_file_names_the_field() -> None:
    with pytest.raises(BadConfig, match="delivery_s_source"):
        serving_boundaries._checked("vllm", [{"since": "0.1", "delivery_s": 1e-4}])
    with pytest.raises(BadConfig, match="delivery_s must be"):
        serving_boundaries._checked("vllm", [{"since": "0.1", "delivery_s": -1.0, "delivery_s_source": "x"}])
    with pytest.raises(BadConfig, match="not after"):
        serving_boundaries._checked("vllm", [{"since": "0.2", "delivery_s": 0.0, "delivery_s_source": "x"},
                                             {"since": "0.1", "delivery_s": 0.0, "delivery_s_source": "x"}])
    with pytest.raises(BadConfig, match="no entry for engine"):
        serving_boundaries.delivery("nosuch")


def test_rank_wait_from_a_traces_collective_skew() -> None:
    # an all-reduce whose ranks spent 100, 160, 130 µs over 10 steps: the last to arrive (100) waited 0, the
    # others 60 and 30 → mean 30 µs over 10 steps; a second collective with no spread adds nothing
    got = rank_wait_from_skew([(100.0, 160.0, 130.0), (50.0, 50.0, 50.0)], 10)
    assert got == pytest.approx(3e-6)
    assert rank_wait_from_skew([], 10) is None and rank_wait_from_skew([(1.0, 2.0)], 0) is None


def test_cli_rank_trace_and_the_scrapes_front_end_plus_delivery() -> None:
    args = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--isl", "1024", "--osl", "101",
            "--num-prompts", "40", "--json"]
    r = CliRunner().invoke(main, [*args, "--rank-trace", str(TRACES / "hta" / "trace_filter"),
                                  "--metrics", str(METRICS / "vllm_v1_c16.prom")])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    wait = {row["part"]: row for row in doc["boundaries"]["tpot"]}["rank_wait"]
    assert wait["source"] == "trace" and wait["ms"]["mean"] > 0
    assert doc["settings"]["engine"]["rank_wait_s"] == pytest.approx(wait["ms"]["mean"] / 1e3, rel=1e-6)
    rows = {row["boundary"]: row for row in doc["engine_metrics"]["boundaries"]}
    # vllm_v1_c16.prom: TTFT 6.0 s, queue 0.35 s, prefill 4.0 s over 100 requests → (6.0 − 0.35 − 4.0) / 100
    assert rows["front_end+delivery"]["measured_ms"]["mean"] == pytest.approx(16.5)
    sim = {row["part"]: row["ms"]["mean"] for row in doc["boundaries"]["ttft"]}
    assert rows["front_end+delivery"]["simulated_ms"]["mean"] == pytest.approx(sim["front_end"] + sim["delivery"])
    one_rank = CliRunner().invoke(main, [*args, "--rank-trace", str(TRACES / "hta" / "trace_filter" /
                                                                     "sampled_rank-0.json.gz")])
    assert one_rank.exit_code == 1 and "two or more ranks" in one_rank.output


def test_text_and_html_show_the_parts(tmp_path: Path) -> None:
    args = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--isl", "512", "--osl", "32",
            "--concurrency", "4", "--num-prompts", "12", "--metrics", str(METRICS / "vllm_v1_c16.prom")]
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0, text.output
    for line in ("by boundary (ms)", "first-token delivery", "rank-arrival wait", "overlap (hidden)",
                 "FRONT END+DELIVERY"):
        assert line in text.output
    page = tmp_path / "sim.html"
    html = CliRunner().invoke(main, [*args, "-o", str(page)])
    assert html.exit_code == 0, html.output
    shown = page.read_text(encoding="utf-8")
    assert "TTFT and TPOT by boundary" in shown and "front_end+delivery" in shown
