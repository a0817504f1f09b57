"""The kernel_tuning track (issue 19 part 4, planner/tracks_kernels.py): the gain never exceeds the time of the kernels
it names, preconditions name a tuned config with its source, the verify gate is the kernel's µs per call, and a trace
whose kernels run at their measured curve gives "no gain from tuning"."""

from __future__ import annotations

from pathlib import Path

import pytest

from independent import DATA
from servescope.advise import analyze, kernel_evidence
from servescope.perfmodel import Scenario
from servescope.planner import plan
from servescope.planner.kernels import KernelEvidence, KernelRow, KindTime
from servescope.planner.tracks_kernels import KernelTuning, fractions, option_for
from servescope.planner.whatif import StepView

SGLANG = DATA / "traces/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"


def _evidence(saved_share: float = 0.5, gemm_us: float = 1000.0) -> KernelEvidence:
    """A decode kind whose gemm class is `gemm_us`; one GEMM kernel (all of it) at 1/(1 − share) of its reference."""
    row = KernelRow("decode", "slow_gemm", "gemm", "gemm", "fp8", 40, gemm_us, gemm_us * (1 - saved_share), 4,
                    tunable=True)
    return KernelEvidence("rtx_pro_6000_server", "a measured curve", (row,),
                          (KindTime("decode", 4, 4 * 1500.0, {"gemm": gemm_us, "norm": 100.0}),))


def test_the_adjustment_gives_back_the_measured_share_of_the_class() -> None:
    ev = _evidence(0.5)
    assert fractions(ev) == (("decode", "gemm", 0.5),)
    view = StepView(0.010, {"weights": 0.006, "compute": 0.002, "overhead": 0.002}, {"gemm": 0.006, "kernel_overhead": 0.002},
                    {}, "weights", 0.005)
    after = KernelTuning(fractions(ev))(None, view)  # type: ignore[arg-type]
    assert after.class_time_s["gemm"] == pytest.approx(0.003) and after.step_time_s == pytest.approx(0.007)
    prefill = StepView(0.010, {"weights": 0.006}, {"gemm": 0.006}, {}, "weights", 0.005, kind="prefill")
    assert KernelTuning(fractions(ev))(None, prefill) is prefill  # measured on decode: prefill untouched


def test_plan_gain_is_bounded_by_the_named_kernels() -> None:
    sc = Scenario.build("llama-3.1-8b", "rtx_pro_6000_server", tp=1, quant="fp8")
    p = plan(sc, kernels=_evidence(0.5), forbid="quantization")
    t = p.track("kernel_tuning")
    assert t.applicable and t.gain is not None and t.gain > 1.0
    step, gemm = p.baseline.step.step_time_s, p.baseline.step.class_time_s["gemm"]
    assert t.gain <= step / (step - gemm) + 1e-9  # never more than all of the named kernels' class time
    assert t.gain == pytest.approx(p.baseline.tpot_s / (p.baseline.tpot_s - 0.5 * gemm), rel=1e-6)
    assert "µs per call" in t.validate and "slow_gemm" in t.validate
    assert t.effort in ("config change", "engine upgrade", "new kernel")
    assert any("source:" in pre for pre in t.preconditions)
    per = t.details["per_kind"]["decode"]
    assert per["saved_us_per_step"] == pytest.approx(125.0) and per["kernels_us_per_step"] == pytest.approx(250.0)


def test_preconditions_come_from_sourced_options() -> None:
    row = KernelRow("decode", "k", "gemm", "gemm", "fp8", 1, 2.0, 1.0, 1, tunable=True)
    sm120 = Scenario.build("llama-3.1-8b", "rtx_pro_6000_server", tp=1, quant="fp8", backend="sglang")
    opt = option_for(row, sm120)
    assert opt is not None and "25696" in opt["source"] and "18870" in opt["caution"]
    moe = KernelRow("decode", "k", "moe", "moe", "fp8", 1, 2.0, 1.0, 1, tunable=True)
    opt = option_for(moe, Scenario.build("llama-3.1-8b", "h100", tp=1))
    assert opt is not None and "32928" in opt["source"] and "44688" in opt["caution"]


def test_no_gain_from_tuning_on_a_trace_at_its_curve() -> None:
    a = analyze(SGLANG)
    sc = Scenario.build("qwen3-8b", "mi300x", tp=1)
    p = plan(sc, kernels=kernel_evidence(a))
    t = p.track("kernel_tuning")
    assert not t.applicable and t.gain is None and t.why_not is not None
    assert t.why_not.startswith("no gain from tuning") and "mi300x" in t.why_not
    assert t.details["achievable_us"] == pytest.approx(t.details["measured_us"], rel=0.05)


def test_without_a_trace_or_a_reference_the_track_says_why(tmp_path: Path) -> None:
    sc = Scenario.build("llama-3.1-8b", "h100", tp=1)
    assert "needs a trace" in (plan(sc).track("kernel_tuning").why_not or "")
    ev = KernelEvidence("b200_sxm", None, (), (), "no measured GEMM curve for b200_sxm")
    assert "no measured GEMM curve" in (plan(sc, kernels=ev).track("kernel_tuning").why_not or "")
