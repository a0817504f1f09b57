"""A deployment calibrated on figures (issue 17 part 2): the reference box (Kimi-K2.5, INT4 experts, 8× RTX PRO 6000
over PCIe, vLLM TP=8) with `tpot=12.1ms@c1` and an all-reduce share at c1 (0.40: reachable by the knobs; the box's
profiled 0.515 is kept with a residual, tested apart). Expectations come from the model's own
terms and the bundled collective curves, never from a plan's output: the step model is being refitted, so the
numbers move and the relations must hold."""

from __future__ import annotations

import pytest

from servescope.calibrate.figure_fit import fit_figures
from servescope.calibrate.figures import parse_figures
from servescope.errors import MeasurementError
from servescope.perfmodel import Efficiency, Scenario, decode_step
from servescope.planner import plan
from servescope.specs.collectives import collective_time_s, load_collectives
from servescope.specs.models import load_model

TPOT, SHARE = 12.1e-3, 0.40
BOTH = ["tpot=12.1ms@c1", "allreduce_share=0.40@c1"]


@pytest.fixture(scope="module")
def kimi() -> Scenario:
    # efficiencies fixed (collective scales 1): the custom path's ratio is then exactly that of the two curves
    # a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`: the newest release's curves; issue 28)
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16", efficiency=Efficiency(),
                          engine_version="+pcie-ar")


@pytest.fixture(scope="module")
def plans(kimi: Scenario):  # type: ignore[no-untyped-def]
    out = {}
    for name, specs in (("none", []), ("tpot", BOTH[:1]), ("both", BOTH)):
        fit = fit_figures(kimi, parse_figures(specs)) if specs else None
        out[name] = plan(kimi, concurrency=1, forbid="quantization", measured=fit)
    return out


def _ar_share(step) -> float:  # type: ignore[no-untyped-def]
    return step.collectives["all_reduce"].time_s / step.step_time_s


def test_the_share_sets_the_collective_latency_and_the_tpot_the_rest(kimi: Scenario) -> None:
    fit = fit_figures(kimi, parse_figures(BOTH))
    terms = {k.knob.name: k for k in fit.terms.knobs}  # type: ignore[union-attr]
    # a share at c1 (14 KB messages, latency-bound) speaks for the per-call latency, not the bandwidth
    assert "allreduce_share=0.40@c1" in terms["collective_latency"].inputs
    assert terms["collective_latency"].status == "set" and terms["collective_latency"].theta > 1.0
    assert terms["collective_bw"].status == "prior" and terms["collective_bw"].theta == pytest.approx(1.0, abs=0.02)
    assert fit.status().startswith("fitted, not validated") and not fit.validated
    # the calibrated decode step, from the model's own terms: TPOT 12.1 ms, all-reduce 51.5 % of it (to the 0.5 %
    # a typed figure is held to)
    d = decode_step(fit.apply(kimi), 1, kimi.isl + kimi.osl / 2)
    assert d.step_time_s == pytest.approx(TPOT, rel=0.01)
    assert _ar_share(d) == pytest.approx(SHARE, abs=0.01)


def test_plan_baseline_is_the_measurement_and_carries_the_share(plans) -> None:  # type: ignore[no-untyped-def]
    b = plans["both"].baseline
    assert b.tpot_s == pytest.approx(TPOT, rel=0.01)
    assert _ar_share(b.step) == pytest.approx(SHARE, abs=0.01)
    assert plans["tpot"].baseline.tpot_s == pytest.approx(TPOT, rel=0.01)


def test_custom_allreduce_is_priced_from_the_calibrated_term(kimi: Scenario, plans) -> None:  # type: ignore[no-untyped-def]
    """The track replaces each all-reduce call by the measured one-shot curve, so a calibrated all-reduce share
    of 51.5 % makes it pay more than the model's own share does."""
    nbytes = load_model("kimi-k2.5").hidden_size * 2  # one token of bf16 activations per all-reduce at batch 1
    raw = plans["none"].baseline.step.collectives["all_reduce"]
    assert raw.bytes_per_call == nbytes
    curves = load_collectives("rtx_pro_6000_server", 8)
    ratio = collective_time_s(curves, "all_reduce", nbytes, backend="pcie_oneshot") / (raw.time_s / raw.calls_per_step)
    assert 0.2 < ratio < 0.8  # one-shot ~10 µs against NCCL ~27 µs at 14 KiB (hardware-and-models.md §2a, §2d)
    with_share = plans["both"].track("custom_allreduce")
    without = plans["tpot"].track("custom_allreduce")
    assert with_share.gain > without.gain * 1.1


def test_two_tpots_that_contradict_are_both_reported(kimi: Scenario) -> None:
    with pytest.raises(MeasurementError) as e:
        fit_figures(kimi, parse_figures(["tpot=12.1ms@c1", "tpot=20ms@c1"]))
    msg = str(e.value)
    assert "tpot=12.1ms@c1" in msg and "tpot=20ms@c1" in msg
    assert f"{(20 - 12.1) / 12.1:+.1%}" in msg and "nor an average" in msg
    # within a stated noise they agree: both are used, and the fit lands between them (weighted by their noise)
    fit = fit_figures(kimi, parse_figures(["tpot=12.1ms±50%@c1", "tpot=14ms@c1"]))
    assert fit.used == ("tpot=12.1ms±50%@c1", "tpot=14ms@c1")
    d = decode_step(fit.apply(kimi), 1, kimi.isl + kimi.osl / 2)
    assert 12.1e-3 < d.step_time_s < 14.1e-3 and abs(d.step_time_s - 14e-3) < abs(d.step_time_s - 12.1e-3)


def test_output_and_tpot_at_one_concurrency_must_agree(kimi: Scenario) -> None:
    # c128, OSL 512: output tok/s = batch · OSL / (TTFT + 511 · TPOT); at 80 ms TPOT that is below 128·512/(511·0.08)
    top = 128 * 512 / (511 * 0.080)
    with pytest.raises(MeasurementError, match="contradict each other: the TPOT at c128"):
        fit_figures(kimi, parse_figures(["tpot=80ms@c128", f"output={2 * top:.0f}tok/s@c128"]))
    fit_figures(kimi, parse_figures(["tpot=80ms@c128", f"output={0.98 * top:.0f}tok/s@c128"]))


@pytest.mark.parametrize(("specs", "says"), [
    (["tpot=12.1ms@c1", "allreduce_share=0.95@c1"], "allreduce_share=0.95@c1 is missed by"),
    (["tpot=12.1ms@c1", "allreduce_share=0.05@c1"], "collective_latency.* held at"),
    (["tpot=12.1ms@c1", "moe_share=0.01@c1"], "moe_share=0.01@c1 is missed by"),
    (["norm_share=0.1@c1"], "shares that calibrate: communication_share, gemm_share"),
])
def test_figures_the_physics_cannot_reach_are_refused(kimi: Scenario, specs: list[str], says: str) -> None:
    with pytest.raises(MeasurementError, match=says) as e:
        fit_figures(kimi, parse_figures(specs))
    assert "\n" not in str(e.value)


def test_a_class_share_sets_that_class(kimi: Scenario) -> None:
    fit = fit_figures(kimi, parse_figures(["tpot=12.1ms@c1", "moe_share=0.2@c1"]))
    d = decode_step(fit.apply(kimi), 1, kimi.isl + kimi.osl / 2)
    assert d.step_time_s == pytest.approx(TPOT, rel=0.01)
    assert d.class_time_s["moe"] / d.step_time_s == pytest.approx(0.2, abs=0.01)
    assert "moe_share=0.2@c1" in {k.name: k for k in fit.knobs}["expert_read"].inputs


def test_the_box_s_profiled_share_is_kept_with_its_residual(kimi: Scenario) -> None:
    """51.5 % of a profiled step beside an unprofiled 12.1 ms TPOT leaves the rest of the step under what its floors
    allow (weights at the datasheet bandwidth, the routing kernels at their measured floor): the fit keeps both, each
    residual within twice the ±5 % between-run noise, and names the knobs held at their bounds in none of it."""
    fit = fit_figures(kimi, parse_figures(["tpot=12.1ms@c1", "allreduce_share=0.515@c1"]))
    res = dict(fit.residuals)
    assert 0.0 < abs(res["allreduce_share=0.515@c1"]) / 0.515 <= 0.10
    assert abs(res["tpot=12.1ms@c1"]) <= 0.10
    assert any(k.status == "at its physical bound" for k in fit.terms.knobs)  # type: ignore[union-attr]


def test_a_share_of_what_the_layout_has_not_is_refused_with_what_it_has() -> None:
    dense_tp1 = Scenario.build("llama-3.1-8b", "h100", tp=1)
    with pytest.raises(MeasurementError, match=r"has no all_reduce \(its collectives: none\); check the layout"):
        fit_figures(dense_tp1, parse_figures(["tpot=8ms@c1", "allreduce_share=0.2@c1"]))
    with pytest.raises(MeasurementError, match="has no moe kernels"):
        fit_figures(dense_tp1, parse_figures(["tpot=8ms@c1", "moe_share=0.2@c1"]))
