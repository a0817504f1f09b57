"""Percentiles on every `model` point (simulate/percentiles.py, issue 29.3): ordered, the simulation's own
numbers at the same seed, labelled with their source, TTFT flagged as a lower bound past the KV cap."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import servescope.simulate.percentiles as pp
from servescope.cli import main
from servescope.perfmodel import predict
from servescope.perfmodel.scenario import Scenario
from servescope.simulate import simulate
from servescope.simulate.percentiles import point_percentiles

CONCS = [1, 4, 16, 64, 128]


@pytest.fixture(scope="module")
def llama8b() -> Scenario:
    return Scenario.build(model="llama-3.1-8b", gpu="h100_sxm")


@pytest.fixture(scope="module")
def sweep(llama8b: Scenario) -> list[pp.PointPercentiles]:
    return point_percentiles(llama8b, CONCS)


def _ordered(q: pp.PointPercentiles) -> None:
    for st in (q.ttft, q.tpot, q.itl):
        assert st.p50_s <= st.p90_s <= st.p99_s
        assert st.p50_s > 0


def test_percentiles_are_ordered_and_simulated(sweep: list[pp.PointPercentiles]) -> None:
    assert [q.concurrency for q in sweep] == CONCS
    for q in sweep:
        _ordered(q)
        assert q.precision == "simulation" and q.source == f"simulation ({q.requests} requests, seed 0)"
    # a closed loop of c requests in flight: TTFT spreads once a wave needs more than one prefill step (8 prompts
    # of 1,024 tokens per 8,192-token step), so c=128 has a real tail and c=1 none
    assert sweep[-1].ttft.p99_s > 1.5 * sweep[-1].ttft.p50_s
    assert sweep[0].ttft.p99_s == pytest.approx(sweep[0].ttft.p50_s, rel=1e-9)


def test_p50_tpot_is_the_simulations_own(llama8b: Scenario, sweep: list[pp.PointPercentiles]) -> None:
    # c=16, osl=512: 2 waves = 32 < the 200-request ceiling, which 25,000 steps × 16 / 512 = 782 exceeds -> 200
    res = simulate(llama8b, "closed", 16, 200, seed=0)
    tpot = res.samples["tpot"]
    q = sweep[CONCS.index(16)]
    assert q.requests == 200
    assert q.tpot.p50_s == pytest.approx(float(np.percentile(tpot[np.isfinite(tpot)], 50)), rel=1e-12)
    assert q.ttft.p99_s == pytest.approx(float(np.percentile(res.samples["ttft"], 99)), rel=1e-12)


def test_request_count_rule() -> None:
    assert pp.point_requests(1, 512, 1) == 49  # ⌈25,000 / 512⌉
    assert pp.point_requests(128, 512, 128) == 256  # two waves
    assert pp.point_requests(1, 8192, 1) == 10  # the floor


def test_lower_bound_past_the_kv_cap() -> None:
    sc = Scenario.build(model="llama-3.1-70b", gpu="h100_sxm", tp=2)
    kv_cap = predict(sc, [1])[0].max_concurrency
    over, under = kv_cap * 2, max(kv_cap // 4, 1)
    lo, hi = point_percentiles(sc, [under, over])
    cap = predict(sc, [over])[0].batch  # the running cap: the batch once the concurrency is above it
    assert hi.ttft_lower_bound and hi.utilisation == pytest.approx(over / cap) and hi.utilisation > 1
    assert not lo.ttft_lower_bound and lo.utilisation < 0.9
    _ordered(hi)


def test_approximation_when_the_budget_is_spent(llama8b: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pp, "SWEEP_STEPS", 0)
    points = predict(llama8b, [8, 64])
    few, many = point_percentiles(llama8b, [8, 64])
    for q, p in ((few, points[0]), (many, points[1])):
        assert q.precision == "closed form" and q.requests == 0
        assert q.source.startswith("queueing approximation (closed form; the sweep's simulation budget is spent")
        assert q.ttft.mean_s == pytest.approx(p.ttft_s, rel=1e-12)
        assert q.tpot.p50_s == q.tpot.p99_s == pytest.approx(p.tpot_s, rel=1e-12)
        _ordered(q)
    # c=8: one prefill step takes the whole wave (8 × 1,024 tokens ≤ 8,192): no spread
    assert few.ttft.p50_s == few.ttft.p99_s == pytest.approx(points[0].ttft_s, rel=1e-12)
    # c=64: 8 steps of 8; the waits 7, 15, …, 63 prefills, 8 requests each: the median position waits the mean
    assert many.ttft.p50_s == pytest.approx(points[1].ttft_s, rel=1e-9) and many.ttft.p99_s > many.ttft.p50_s


def test_model_json_and_text_carry_them() -> None:
    args = ["model", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1,64"]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    for p in json.loads(result.stdout)["points"]:
        q = p["percentiles"]
        assert q["ttft_ms"]["p50"] <= q["ttft_ms"]["p90"] <= q["ttft_ms"]["p99"]
        assert q["source"].startswith("simulation (") and q["precision"] == "simulation"
        assert p["precision"] == {"tpot_ms": "closed form", "ttft_ms": "closed form", "percentiles": "simulation"}
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "percentiles per point" in text.stdout and "seed 0" in text.stdout


def test_calibrated_tier_under_measured() -> None:
    args = ["model", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1", "--json"]
    result = CliRunner().invoke(main, [*args, "--measured", "tpot=9ms@c1"])
    assert result.exit_code == 0, result.output
    point = json.loads(result.stdout)["points"][0]
    assert point["precision"] == {"tpot_ms": "calibrated", "ttft_ms": "closed form",
                                  "percentiles": "simulation, calibrated"}
    # the percentiles run the calibrated scenario: at c1 (one request in flight) the median TPOT is the calibrated 9 ms
    assert point["percentiles"]["tpot_ms"]["p50"] == pytest.approx(point["tpot_ms"], rel=0.01)


def test_simulate_flag_runs_are_the_source() -> None:
    args = ["model", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "64", "--simulate", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    point = json.loads(result.stdout)["points"][0]
    assert point["percentiles"]["source"] == "simulation (256 requests, seed 0)"  # 4 waves of 64
    assert point["percentiles"]["ttft_ms"]["p50"] == point["ttft_p50_ms"]
    assert point["percentiles"]["tpot_ms"]["p99"] == point["tpot_p99_ms"]


def test_decode_only_is_approximated(llama8b: Scenario) -> None:
    from dataclasses import replace

    sc = replace(llama8b, decode_only=True)
    (q,) = point_percentiles(sc, [64])
    assert q.precision == "closed form" and "decode-only" in q.source
    assert q.tpot.p50_s == pytest.approx(predict(sc, [64])[0].tpot_s, rel=1e-12)
