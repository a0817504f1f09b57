"""Calibration by physical term (calibrate.terms, issue 26): the knobs' arithmetic against the Efficiency fields,
recovery of knob values from figures the model itself makes, priors with sources, and physical bounds."""

from __future__ import annotations

import math

import pytest

from servescope.calibrate.figures import parse_figures
from servescope.calibrate.terms import fit_terms, roofline_start, set_knobs, term_knobs
from servescope.perfmodel import Scenario, decode_step, predict
from servescope.perfmodel.efficiency import Efficiency
from servescope.specs import tables


@pytest.fixture(scope="module")
def kimi() -> Scenario:
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, isl=1024, osl=1024)


def test_a_knob_divides_its_rates_and_multiplies_its_times() -> None:
    eff = Efficiency()
    moved = set_knobs(eff, {"expert_read": 2.0, "collective_latency": 3.0, "collective_bw": 0.5})
    assert moved.moe_bw_eff == pytest.approx(eff.moe_bw_eff / 2.0)
    assert moved.collective_latency_scale == pytest.approx(eff.collective_latency_scale * 3.0)
    assert moved.collective_bw_scale == pytest.approx(eff.collective_bw_scale / 0.5)
    assert moved.gemm_bw_eff == eff.gemm_bw_eff and moved.cpu_overhead_s == eff.cpu_overhead_s


def test_every_prior_has_a_source_and_the_range_spreads_come_from_ranges_json() -> None:
    doc = tables.read_toml("calibration_priors.toml")["knob"]
    q10, q90 = tables.error_ranges()["cases"]["system_unseen"]["tpot"]
    for k in term_knobs():
        raw = doc[k.name]["log_sd"]
        if isinstance(raw, str):
            case = raw.removesuffix("_range")
            lo, hi = tables.error_ranges()["cases"]["system_unseen"][case]
            assert k.log_sd == pytest.approx(math.log(hi / lo) / 2.563)
        else:
            assert len(doc[k.name]["log_sd_source"]) > 40  # a wide prior says why
    assert {k.name for k in term_knobs()} >= {"host", "expert_read", "collective_latency", "collective_bw"}
    assert q90 > q10


def test_figures_made_by_the_model_are_reproduced_and_a_held_out_point_follows(kimi: Scenario) -> None:
    """Truth: the roofline scenario with expert reads ×0.8 and collective latency ×1.6. Its TPOT at c1, all-reduce
    share at c1 and TPOT at c128 calibrate; the fit reproduces them and predicts the truth's TPOT at c32 (never seen)
    within 3 %."""
    base = roofline_start(kimi)
    truth = base.with_(efficiency=set_knobs(base.efficiency, {"expert_read": 0.8, "collective_latency": 1.6}))
    p1, p32, p128 = predict(truth, [1, 32, 128])
    d1 = decode_step(truth, 1, truth.decode_context)
    share = d1.collectives["all_reduce"].time_s / d1.step_time_s
    figs = parse_figures([f"tpot={p1.tpot_s * 1e3:.5g}ms@c1", f"allreduce_share={share:.4f}@c1",
                          f"tpot={p128.tpot_s * 1e3:.5g}ms@c128"])
    fit = fit_terms(kimi, figs)
    assert all(abs(r) < 0.01 for _, r in fit.residuals)
    got = predict(fit.apply(kimi), [32])[0]
    assert got.tpot_s == pytest.approx(p32.tpot_s, rel=0.03)
    theta = fit.theta
    assert theta["collective_latency"] == pytest.approx(1.6, rel=0.1)


def test_no_knob_prices_a_term_faster_than_the_datasheet(kimi: Scenario) -> None:
    fit = fit_terms(kimi, parse_figures(["tpot=12.1ms@c1", "output=1536tok/s@c128"]))
    eff = fit.apply(kimi).efficiency
    for name in ("gemm_bw_eff", "moe_bw_eff", "attn_bw_eff", "compute_eff", "moe_compute_eff", "attn_compute_eff"):
        assert getattr(eff, name) <= 1.0 + 1e-9
    assert eff.collective_latency_scale >= 1.0 - 1e-9
    assert eff.op_curves == 0.0  # the user's figures replace other boxes' measured curves


def test_a_knob_no_figure_sees_stays_at_its_prior(kimi: Scenario) -> None:
    fit = fit_terms(kimi, parse_figures(["tpot=12.1ms@c1"]))
    by = {k.knob.name: k for k in fit.knobs}
    assert by["prefill"].theta == pytest.approx(1.0, abs=1e-6) and by["prefill"].status == "prior"
    assert by["frontend"].inputs == ()
