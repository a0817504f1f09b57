"""Calibration on the real B200 trace (vLLM gpt-oss-120b, 8x B200 TP=8, one eager prefill of 888 tokens) and
the refusals when trace and scenario disagree. Independent numbers come from the raw JSON (tests/independent.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import servescope
from independent import DATA, gpu_events, raw_events, union_us
from servescope.analysis.breakdown import breakdown
from servescope.calibrate import CLASSES, calibrate, calibration_table
from servescope.errors import PlanError
from servescope.perfmodel import Efficiency, Scenario
from servescope.planner import plan
from servescope.report.plan_doc import plan_document
from servescope.report.plan_text import plan_lines
from servescope.trace import load_trace

TRACE = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
DECODE = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
GPT_OSS_20B = DATA / "planner" / "openai--gpt-oss-20b_config.json"
DECODE_CONTEXT = 55086 / 32  # step label: 32 sequences, sk55086 KV tokens in all


@pytest.fixture(scope="module")
def trace_breakdown():  # type: ignore[no-untyped-def]
    return breakdown(load_trace(TRACE))


@pytest.fixture(scope="module")
def gpt_oss() -> Scenario:
    return Scenario.build("gpt-oss-120b", "b200", tp=8, quant="native", efficiency=Efficiency())


@pytest.fixture(scope="module")
def cal(trace_breakdown, gpt_oss):  # type: ignore[no-untyped-def]
    return calibrate(trace_breakdown, gpt_oss)


def test_trace_is_what_the_scenario_says(trace_breakdown, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    step = trace_breakdown.steps[0]
    assert (step.kind, step.tokens, step.batch_size) == ("prefill", 888, 1)
    # gpt-oss-120b has 36 layers: 2 all-reduces per layer + 1 (vocab-parallel embedding) at TP=8
    assert gpt_oss.model.n_layers == 36
    assert step.collectives["all_reduce"].calls == 2 * 36 + 1


def test_reproduces_the_measured_step_class_by_class(cal) -> None:  # type: ignore[no-untyped-def]
    for cls in (*CLASSES, "step"):
        assert abs(cal.residuals[cls]) < 0.05, (cls, cal.residuals[cls])
    assert not cal.cuda_graphs  # the trace is eager
    assert cal.knobs["overhead"] == "launch_overhead_s"
    assert any("launch-bound" in w for w in cal.warnings)  # 146 µs per launch: profiler-inflated
    rows = {r["class"]: r for r in calibration_table(cal)}
    assert rows["moe"]["model_us"] == pytest.approx(rows["moe"]["measured_us"], rel=0.05)


def test_measured_numbers_match_the_raw_trace(cal) -> None:  # type: ignore[no-untyped-def]
    """Communication and span recomputed from the raw JSON: every all-reduce/all-gather kernel, and the
    first-to-last GPU event of the annotated step."""
    events = gpu_events(raw_events(TRACE))
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in events
            if "all_reduce" in e["name"] or "AllGather" in e["name"]]
    assert len(comm) == 74
    assert cal.measured_s["communication"] * 1e6 == pytest.approx(union_us(comm), rel=0.01)
    step = [e for e in raw_events(TRACE) if e.get("cat") == "gpu_user_annotation"
            and e["name"].startswith("execute_context")][0]
    assert cal.measured_s["step"] * 1e6 == pytest.approx(step["dur"], rel=0.02)


def test_plan_on_the_calibrated_model(cal, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    p = plan(gpt_oss, concurrency=1, calibration=cal)
    doc = plan_document(p)
    assert doc["calibrated"] is True
    assert p.measured_step is not None
    assert p.measured_step["measured_ms"] == pytest.approx(cal.measured_s["step"] * 1e3)
    for t in p.tracks:
        if t.applicable and t.gain is not None:
            after = t.details["measured_step_ms_after"]
            assert t.details["gain_on_measured_step"] == pytest.approx(p.measured_step["measured_ms"] / after)
    # one step: five knobs reproduce five measured numbers by construction, so the fit's residual is no error
    # estimate: the plan says "fitted, not validated" and keeps the uncalibrated (cross-validated) range
    assert not cal.validated and cal.cross_step_error is None
    assert p.gain_range.basis == "cross_validated"
    assert p.gain_range.ratio_q == plan(gpt_oss, concurrency=1).gain_range.ratio_q
    assert "fitted, not validated" in plan_lines(p)[0]
    assert doc["calibration"]["validated"] is False
    assert "fitted, not validated" in doc["calibration"]["error_basis"]
    # NVLink B200: vLLM already runs its custom all-reduce
    assert "already in use" in (p.track("custom_allreduce").why_not or "")
    uncal = plan_document(plan(gpt_oss, concurrency=1))
    assert uncal["calibrated"] is False


def _step(trace_breakdown, **changes):  # type: ignore[no-untyped-def]
    return replace(trace_breakdown.steps[0], **changes)


@pytest.mark.parametrize(
    ("changes", "words"),
    [({"kind": "mixed"}, "pure prefill or decode"),
     ({"tokens": None}, "token count"),
     ({"collectives": {}}, "0 all-reduce calls")],
)
def test_refuses_steps_that_disagree(trace_breakdown, gpt_oss, changes, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError, match=words) as err:
        calibrate(_step(trace_breakdown, **changes), gpt_oss)
    assert "\n" not in str(err.value)


def test_refuses_scenarios_that_disagree(trace_breakdown) -> None:  # type: ignore[no-untyped-def]
    eff = Efficiency()
    step = trace_breakdown.steps[0]
    tp1 = Scenario.build("gpt-oss-120b", "b200", tp=1, quant="native", efficiency=eff)
    with pytest.raises(PlanError, match="all-reduce calls per step, but gpt-oss-120b at TP=1"):
        calibrate(step, tp1)  # a single step carries no world size: the all-reduce count catches it
    with pytest.raises(PlanError, match="world size 8"):
        calibrate(trace_breakdown, tp1)
    h100 = Scenario.build("gpt-oss-120b", "h100_sxm", tp=8, quant="native", efficiency=eff)
    with pytest.raises(PlanError, match="B200"):
        calibrate(trace_breakdown, h100)
    dense = Scenario.build("llama-3.1-70b", "b200", tp=8, efficiency=eff)
    with pytest.raises(PlanError, match="dense"):
        calibrate(trace_breakdown, dense)


def test_calibration_only_applies_to_its_own_setup(cal) -> None:  # type: ignore[no-untyped-def]
    other = Scenario.build("gpt-oss-120b", "b200", tp=4, quant="native", efficiency=Efficiency())
    with pytest.raises(PlanError, match="cannot be applied"):
        plan(other, calibration=cal)


def test_decode_step_under_cuda_graphs() -> None:
    """MI300X, vLLM FULL graph decode of 32 sequences, gpt-oss-20b on one GPU (no collectives)."""
    b = breakdown(load_trace(DECODE))
    step = b.steps[0]
    assert (step.kind, step.batch_size, step.graph_launches) == ("decode", 32, 1)
    # isl + osl/2 = the trace's context, so the plan's decode step is the measured one
    sc = Scenario.build(str(GPT_OSS_20B), "mi300x", tp=1, quant="native", isl=1000, osl=1443,
                        efficiency=Efficiency())
    cal = calibrate(b, sc, context_len=DECODE_CONTEXT)
    assert cal.cuda_graphs and cal.knobs["overhead"] == "kernel_overhead_s"
    assert not cal.warnings
    for cls in ("gemm", "moe", "attention", "overhead", "step"):
        assert abs(cal.residuals[cls]) < 0.05, (cls, cal.residuals[cls])
    assert "communication" not in cal.residuals  # TP=1: nothing measured, nothing fitted
    assert cal.knobs["moe"] == "moe_bw_eff"  # decode: the bandwidth knob first
    p = plan(sc, concurrency=32, calibration=cal)
    assert p.uncertainty == pytest.approx(0.3)  # one decode step: fitted, not validated
    step_s = p.baseline.step.step_time_s - p.baseline.step.class_time_s["host"]  # GPU part, no CPU time
    assert step_s == pytest.approx(step.gpu_span_us / 1e6, rel=0.05)
    with pytest.raises(PlanError, match="world size 1"):
        calibrate(b, Scenario.build(str(GPT_OSS_20B), "mi300x", tp=2, quant="native", efficiency=Efficiency()))


def test_split_k_on_the_low_occupancy_attention(cal, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    """The B200 prefill's fmha kernels run a 4×8 grid on 148 SMs: 32/148 = 0.216 blocks per SM. Filling every
    SM divides the attention time by that fraction: the measured step loses attention × (1 − 32/148)."""
    events = gpu_events(raw_events(TRACE))
    fmha = [e for e in events if e["name"].startswith("fmhaSm100")]
    assert {tuple(e["args"]["grid"]) for e in fmha} == {(4, 8, 1)}
    assert cal.attention_blocks_per_sm == pytest.approx(32 / 148, rel=1e-4)
    t = plan(gpt_oss, concurrency=1, calibration=cal).track("split_k_attention")
    assert t.applicable and t.effort == "engine upgrade"
    attention_ms = cal.measured_s["attention"] * 1e3
    expected = cal.measured_s["step"] * 1e3 - attention_ms * (1 - 32 / 148)
    assert t.details["measured_step_ms_after"] == pytest.approx(expected, rel=1e-3)


def test_a_trace_of_another_model_is_refused_with_the_evidence(trace_breakdown) -> None:  # type: ignore[no-untyped-def]
    """The bundled B200 trace is gpt-oss-120b (36 layers: 73 all-reduces and 73 RMSNorm kernels in its step, counted
    from the raw JSON here). Calibrated as gpt-oss-20b (24 layers) it would still fit — five knobs always can — but
    two independent checks (all-reduce calls, RMSNorm kernels) say it is another model: refused in one line that
    lists both, as a trace of another GPU is."""
    bundled = Path(servescope.__file__).parent / "examples" / "b200_vllm_gptoss_tp8_eager_prefill.json.gz"
    assert bundled.read_bytes() == TRACE.read_bytes()  # the bundled example is this trace
    events = gpu_events(raw_events(TRACE))
    norms = [e for e in events if "rms_norm" in e["name"].lower() or "rmsnorm" in e["name"].lower()]
    assert len(norms) == 73 == 2 * 36 + 1
    # the MoE router is a 2880 -> 128 linear: 128 experts, gpt-oss-120b (gpt-oss-20b has 32)
    routers = {json.dumps(e["args"]["Input Dims"]) for e in raw_events(TRACE)
               if e.get("name") == "aten::linear" and "Input Dims" in e.get("args", {})}
    assert "[[888, 2880], [128, 2880], [128]]" in routers
    small = Scenario.build("gpt-oss-20b", "b200", tp=8, quant="native", efficiency=Efficiency())
    with pytest.raises(PlanError) as exc:
        calibrate(trace_breakdown, small)
    msg = str(exc.value)
    assert "\n" not in msg and "is not gpt-oss-20b" in msg and "2 independent checks" in msg
    assert "73 all-reduce calls per step imply ~36 layers" in msg and "73 RMSNorm kernels" in msg


def test_a_wrong_model_trace_is_refused_by_plan_and_report() -> None:
    from click.testing import CliRunner

    from servescope.cli import main

    for cmd in (["plan"], ["report"]):
        r = CliRunner().invoke(main, [*cmd, str(TRACE), "--model", "gpt-oss-20b", "--gpu", "b200", "--tp", "8",
                                      *(["--format", "json"] if cmd == ["report"] else [])])
        assert r.exit_code == 1, r.output
        assert r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not gpt-oss-20b" in lines[0] and "RMSNorm" in lines[0], lines


def test_gpt_oss_20b_trace_calibrated_as_120b_warns() -> None:
    """The MI300X decode trace is gpt-oss-20b at TP=1 (no all-reduce to count): its 49 RMSNorm kernels (2 × 24 + 1)
    disagree with gpt-oss-120b's 36 layers."""
    b = breakdown(load_trace(DECODE))
    events = gpu_events(raw_events(DECODE))
    assert sum(1 for e in events if "rms" in e["name"].lower() and "norm" in e["name"].lower()) == 49
    big = Scenario.build("gpt-oss-120b", "mi300x", tp=1, quant="native", isl=1000, osl=1443, efficiency=Efficiency())
    cal = calibrate(b, big, context_len=DECODE_CONTEXT)
    assert any("imply ~24 layers" in w and "gpt-oss-120b has 36" in w for w in cal.warnings)
    p = plan(big, concurrency=32, calibration=cal)
    assert any("imply ~24 layers" in w for w in plan_document(p)["warnings"])  # one check alone: a warning
    assert any("imply ~24 layers" in line for line in plan_lines(p))
    # the right config gives no such warning (test_decode_step_under_cuda_graphs: no warnings at all)


def test_cross_step_error_sets_the_range(trace_breakdown, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    """Two identical prefills whose spans differ by 20 % (synthetic): the knobs fit the sum, so each step's model
    time is the mean span and the per-step errors are (mean − span) / span, ±9 %: the plan's range uses them."""
    s0 = trace_breakdown.steps[0]
    s1 = replace(s0, index=1, gpu_span_us=s0.gpu_span_us * 1.2)
    two = replace(trace_breakdown, steps=(s0, s1))
    cal = calibrate(two, gpt_oss)
    mean = (s0.gpu_span_us + s1.gpu_span_us) / 2
    expected = [(mean - s.gpu_span_us) / s.gpu_span_us for s in (s0, s1)]
    assert cal.step_errors == pytest.approx(expected, rel=0.02)
    assert cal.validated and cal.cross_step_error == pytest.approx(max(abs(e) for e in expected), rel=0.02)
    p = plan(gpt_oss, concurrency=1, calibration=cal)
    # prefill steps only: the plan prices decode, so at least OTHER_KIND_UNCERTAINTY (0.2)
    assert p.uncertainty == pytest.approx(max(0.2, cal.cross_step_error))
    doc = plan_document(p)["calibration"]
    assert doc["validated"] is True and doc["cross_step_error"] == pytest.approx(cal.cross_step_error)
    assert "cross-step error" in doc["error_basis"]
    assert "fitted, not validated" not in plan_lines(p)[0]


def test_near_peak_and_faster_than_measured_warnings(cal) -> None:  # type: ignore[no-untyped-def]
    """The B200 fit's collective bandwidth lands above the measured curve: said, not hidden. An efficiency fitted
    above 90 % of its peak is flagged the same way (synthetic: the fitted values with one knob raised)."""
    from servescope.calibrate import _eff_warnings

    if cal.efficiency.collective_bw_scale > 1.0:
        assert any("faster than the collective measured alone" in w for w in cal.warnings)
    high = replace(cal.efficiency, compute_eff=0.95)
    assert any("above 90% of the peak" in w for w in _eff_warnings(high, {"gemm": "compute_eff"}))
    assert not any("peak" in w for w in _eff_warnings(replace(high, compute_eff=0.5), {"gemm": "compute_eff"}))


def _spaced(step, gaps_us):  # type: ignore[no-untyped-def]
    """Copies of `step` laid end to end on the GPU with the given idle gaps between them (synthetic timing)."""
    out, t = [], step.gpu_start_us
    for i, gap in enumerate([*gaps_us, None]):
        out.append(replace(step, index=i, gpu_start_us=t, gpu_end_us=t + step.gpu_span_us))
        t += step.gpu_span_us + (gap or 0.0)
    return tuple(out)


def test_cpu_time_between_steps_is_measured(trace_breakdown, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    """Three copies of the real B200 prefill step 2 ms and 4 ms apart (synthetic spacing): the median idle, 3 ms, is
    the step's CPU time on an engine that does not overlap scheduling (vLLM 0.12: async scheduling opt-in) — it
    replaces the fitted cpu_overhead_s, shows in the calibration table, and leaves the GPU-side fit as it was with one
    step."""
    gpt_oss = gpt_oss.with_(engine_version="0.12.0")
    assert not gpt_oss.overlaps_cpu
    three = replace(trace_breakdown, steps=_spaced(trace_breakdown.steps[0], [2000.0, 4000.0]))
    cal = calibrate(three, gpt_oss)
    assert cal.step_gap_s == pytest.approx(3e-3) and cal.step_gap_pairs == 2
    assert cal.efficiency.cpu_overhead_s == pytest.approx(3e-3) and cal.efficiency.cpu_overhead_per_seq_s == 0.0
    one = calibrate(trace_breakdown, gpt_oss)
    assert one.step_gap_s is None and one.efficiency.cpu_overhead_s == gpt_oss.efficiency.cpu_overhead_s
    for k in ("compute_eff", "moe_compute_eff", "attn_compute_eff", "launch_overhead_s"):
        assert getattr(cal.efficiency, k) == pytest.approx(getattr(one.efficiency, k), rel=1e-9)
    (row,) = [r for r in calibration_table(cal) if r["class"] == "cpu (between)"]
    assert row["measured_us"] == pytest.approx(3000.0) and row["model_us"] == pytest.approx(3000.0)
    assert row["knob"] == "cpu_overhead_s"
    p = plan(gpt_oss, concurrency=1, calibration=cal)
    assert any("cpu (between)" in line for line in plan_lines(p))
    track = p.track("async_scheduling")
    assert track.applicable and any("measured between consecutive steps" in x for x in track.preconditions)
    assert plan_document(p)["calibration"]["step_gap_ms"] == pytest.approx(3.0)


def test_overlapping_engine_keeps_its_fitted_cpu_time(trace_breakdown, gpt_oss) -> None:  # type: ignore[no-untyped-def]
    trt = gpt_oss.with_(backend="trtllm")
    three = replace(trace_breakdown, steps=_spaced(trace_breakdown.steps[0], [2000.0, 2000.0]))
    cal = calibrate(three, trt)
    assert cal.step_gap_s == pytest.approx(2e-3)
    assert cal.efficiency.cpu_overhead_s == trt.efficiency.cpu_overhead_s
    assert any("overlaps scheduling" in w for w in cal.warnings)


def test_a_collective_latency_far_above_its_curve_says_profiled_or_eager() -> None:
    """The reference box's profiled decode step fits a latency scale of ~3.3 (issue 18): said, with the way out;
    an in-situ scale near 1 is not."""
    from servescope.calibrate import _eff_warnings

    knobs = {"communication": "collective_latency_scale"}
    (w,) = [x for x in _eff_warnings(Efficiency(collective_latency_scale=3.3), knobs) if "profiled" in x]
    assert "3.3x the measured curve" in w and "--measured" in w
    assert not [x for x in _eff_warnings(Efficiency(collective_latency_scale=1.4), knobs) if "profiled" in x]
