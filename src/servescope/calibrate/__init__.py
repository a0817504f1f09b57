"""Fit the performance model's efficiencies to measured steps of a trace, and report how well it then explains them.

Does: for the chosen prefill/decode steps of a `TraceBreakdown` (or one `StepBreakdown`), after checking that the
trace and the scenario describe the same thing (GPU, GPU count, all-reduce calls per step ≈ the model's
2·layers + a few for TP>1 and none for TP=1, a dense model vs MoE kernels, a pure step with a token count), fit
one knob per kernel class so that the model's class time equals the measured one (summed over the steps):
  gemm       compute_eff (prefill) or gemm_bw_eff (decode), the other if the first cannot reach the measurement
  moe        moe_compute_eff / moe_bw_eff (same rule)
  attention  attn_compute_eff / attn_bw_eff (same rule)
  communication  collective_bw_scale when the bandwidth part dominates the model's time, else
                 collective_latency_scale
  overhead   launch_overhead_s (eager) or kernel_overhead_s (CUDA graphs), against the measured step span minus the
             four classes above (small kernels — norm, cast, rotary, memory, ... — and idle gaps); the model's
             per-step CPU time (scheduler, sampling) falls between GPU spans: where the trace has a step after a
             calibrated one, the median GPU idle between them is that CPU time, measured — it replaces the fitted
             cpu_overhead_s (per-sequence part 0) unless the engine overlaps scheduling with the GPU
Each knob is solved by bisection in log space (a class's time is monotone in its knob); of the knobs that reach
the measurement, the one that moves least from its prior value wins (the most plausible cause); efficiencies stay in
[0.005, 1.5]. Measured class times are interval unions per device (servescope.analysis.breakdown), divided by the number of
devices in the step.
Honesty: k knobs fitted to k measured numbers reproduce them by construction, so the fit's own residual says
nothing about error. With two or more steps the knobs fit the sums and each step's residual is an out-of-fit check:
`cross_step_error` (80th percentile of |per-step error|) is what a plan's ranges use; with one step the calibration
is "fitted, not validated" and the plan keeps the uncalibrated range. Warnings (text and JSON): a fitted efficiency
above 90 % of its peak (above 100 %: the model over-counts work), a collective faster than its measured curve or its
latency scaled above 2× it (a profiled or eager step: the all-reduce tracks would be priced on it), and a
trace that disagrees with the model config — layers (RMSNorm kernels per step ≈ 2·layers + 1 in vLLM/SGLang, and
all-reduces per step ≈ the model's at TP>1) or hidden size (all-reduce message bytes / tokens / 2 B, when the trace
records message sizes). Two or more of these three independent checks disagreeing refuse the trace (PlanError
listing the evidence, as a trace of another GPU or GPU count is refused): the fit would be of another model.
The trace-vs-scenario checks live in servescope.calibrate.trace_checks; the pricing of step shapes and the bisection in servescope.calibrate.fit (each distinct step shape's
efficiency-free parts are built once; bit-for-bit the same numbers as pricing every step at every evaluation).
Does not: read files (pass a breakdown), or fit anything outside these knobs (memory; the CPU time is measured or
left as the global fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import median
from typing import TYPE_CHECKING

from servescope.calibrate.fit import (
    CLASSES,
    EFF_RANGE,
    PricedSteps,
    StepPricer,
    fit_class,
    knob_value,
)
from servescope.calibrate.trace_checks import (
    check_collectives,
    check_shape,
    check_step,
    check_trace,
    is_step,
    is_trace,
    refuse_another_model,
    source_of,
)
from servescope.errors import PlanError
from servescope.perfmodel import Efficiency, Scenario
from servescope.units import s_to_us, us_to_s

if TYPE_CHECKING:  # the trace's breakdown (Polars) is imported where a trace is calibrated, not by figure users
    from servescope.analysis.breakdown import StepBreakdown, TraceBreakdown

__all__ = ["CLASSES", "CalibratedStep", "Calibration", "calibrate", "calibration_table", "knob_value"]
NEAR_PEAK = 0.9  # a fitted efficiency above this share of its peak is implausible for real kernels
STEP_ERROR_QUANTILE = 0.8  # the cross-step error is this quantile of |per-step error| (an 80 % range)
# a fitted collective latency scale above this is not in-situ rank skew (measured curves already include the
# engine's own call path) but a profiled or eager step: the reference box's profiled step fits ~3.3 (issue 18)
PROFILED_LATENCY_SCALE = 2.0


@dataclass(frozen=True)
class CalibratedStep:
    index: int
    kind: str
    tokens: int | None
    batch: int | None
    measured_s: dict[str, float]  # per class and "step"
    predicted_s: dict[str, float]
    context_len: float | None = None  # decode: context per sequence the step was priced at
    idle_share: float | None = None  # share of the step's GPU span (× devices) with no kernel running


@dataclass(frozen=True)
class Calibration:
    """Fitted efficiencies and how well the model then reproduces the measured steps."""

    efficiency: Efficiency
    cuda_graphs: bool
    model: str
    gpu: str
    tp: int
    steps: tuple[CalibratedStep, ...]
    measured_s: dict[str, float]  # per class, summed over steps
    predicted_s: dict[str, float]
    residuals: dict[str, float]  # (predicted − measured) / measured per class
    knobs: dict[str, str]  # class -> knob fitted
    class_per_call_s: dict[str, float] = field(default_factory=dict)  # measured time per kernel call, per class
    attention_blocks_per_sm: float | None = None
    warnings: tuple[str, ...] = ()
    step_errors: tuple[float, ...] = ()  # per step: (model − measured) / measured step time after the fit
    # median GPU idle between a calibrated step and the next step of the trace (None: fewer than two steps); on an
    # engine that does not overlap scheduling it is the step's CPU time and replaces the fitted cpu_overhead_s
    step_gap_s: float | None = None
    step_gap_pairs: int = 0
    cpu_measured: bool = False  # step_gap_s replaced cpu_overhead_s (per-sequence part 0)

    @property
    def validated(self) -> bool:
        """True when the fit can be checked against numbers it did not reproduce by construction (≥ 2 steps)."""
        return len(self.step_errors) >= 2

    @property
    def cross_step_error(self) -> float | None:
        """80th percentile (nearest rank) of |per-step error|; None with fewer than two steps."""
        if not self.validated:
            return None
        errs = sorted(abs(e) for e in self.step_errors)
        return errs[min(len(errs) - 1, math.ceil(STEP_ERROR_QUANTILE * len(errs)) - 1)]

    @property
    def error_basis(self) -> str:
        """One line: where a plan's ranges come from."""
        if self.validated:
            return f"cross-step error ±{self.cross_step_error:.0%} over {len(self.step_errors)} steps"
        n = len(self.knobs)
        return (f"fitted, not validated: {n} knob(s) reproduce {n} measured number(s) of one step by construction; "
                "ranges stay those of the uncalibrated model")

    def apply(self, scenario: Scenario) -> Scenario:
        """The scenario with the fitted efficiencies and the trace's graph mode; PlanError if it is another setup."""
        if (scenario.model.name, scenario.gpu.name, scenario.tp) != (self.model, self.gpu, self.tp):
            raise PlanError(f"calibration fitted on {self.model} / {self.gpu} / TP={self.tp} cannot be applied to "
                            f"{scenario.model.name} / {scenario.gpu.name} / TP={scenario.tp}")
        return scenario.with_(efficiency=self.efficiency, cuda_graphs=self.cuda_graphs)

    def __repr__(self) -> str:
        return (f"Calibration({self.model} on {self.gpu}, tp={self.tp}: {len(self.steps)} step(s), "
                f"{len(self.residuals)} class residuals, {len(self.warnings)} warning(s))")


def calibrate(breakdown: TraceBreakdown | StepBreakdown, scenario: Scenario, step: int | None = None,
              context_len: float | None = None) -> Calibration:
    """Fit `scenario`'s efficiencies to the breakdown's prefill/decode steps (or the one step `step`).

    `context_len`: tokens of context per sequence in the decode steps (traces do not carry it; vLLM's step label
    has the sum over sequences as `sk…`); default isl + osl/2 of the scenario, with a warning."""
    steps = _choose_steps(breakdown, step)
    warnings: list[str] = []
    if is_trace(breakdown):
        check_trace(breakdown, scenario)
    graphs = any(s.graph_launches > 0 for s in steps)
    if graphs != bool(scenario.cuda_graphs):
        warnings.append(f"trace {'replays CUDA graphs' if graphs else 'runs eagerly'}; the scenario's "
                        f"cuda_graphs={scenario.cuda_graphs} was set to {graphs} to match it")
        scenario = scenario.with_(cuda_graphs=graphs)
    for s in steps:
        check_step(s, scenario, warnings)
    measured = [_measured(s) for s in steps]
    pricers = [_pricer(s, scenario, warnings, context_len) for s in steps]
    _check_model(breakdown, steps, scenario, pricers, warnings)
    shapes = PricedSteps(pricers, scenario)  # efficiency-free parts of each distinct step shape, built once
    eff, knobs = _fit_classes(steps, measured, scenario, shapes)
    gap_s, pairs = _step_gap(breakdown, steps)
    cpu_measured = gap_s is not None and not scenario.overlaps_cpu
    if gap_s is not None and cpu_measured:
        eff = replace(eff, cpu_overhead_s=gap_s, cpu_overhead_per_seq_s=0.0)  # measured, not fitted
    elif gap_s is not None:
        warnings.append(f"{scenario.backend} overlaps scheduling with the GPU: the {gap_s * 1e3:.2f} ms of GPU idle "
                        "between steps is only the CPU time the GPU could not hide; cpu_overhead_s stays fitted")
    predicted = shapes.classes(eff)
    tot_m = {c: sum(m[c] for m in measured) for c in (*CLASSES, "step")}
    tot_p = {c: sum(p[c] for p in predicted) for c in (*CLASSES, "step")}
    warnings += _eff_warnings(eff, knobs)
    ctx = context_len if context_len is not None else scenario.isl + scenario.osl / 2.0
    return Calibration(
        efficiency=replace(eff, source=f"calibrated on {source_of(breakdown)}"),
        cuda_graphs=graphs, model=scenario.model.name, gpu=scenario.gpu.name, tp=int(scenario.tp),
        steps=_calibrated_steps(steps, measured, predicted, ctx), measured_s=tot_m, predicted_s=tot_p,
        residuals={c: (tot_p[c] - tot_m[c]) / tot_m[c] for c in (*CLASSES, "step") if tot_m[c] > 0}, knobs=knobs,
        class_per_call_s=_per_call(steps), attention_blocks_per_sm=_attention_blocks(steps),
        warnings=tuple(dict.fromkeys(warnings)),
        step_errors=tuple((p["step"] - m["step"]) / m["step"] for m, p in zip(measured, predicted, strict=True)
                          if m["step"] > 0),
        step_gap_s=gap_s, step_gap_pairs=pairs, cpu_measured=cpu_measured,
    )


def _check_model(breakdown: TraceBreakdown | StepBreakdown, steps: list[StepBreakdown], scenario: Scenario,
                 pricers: list[StepPricer], warnings: list[str]) -> None:
    """The independent model-mismatch checks on every step (warnings), refusing another model (trace_checks)."""
    priced = {p: p(scenario) for p in dict.fromkeys(pricers)}  # each distinct step shape once
    evidence: dict[str, str] = {}  # independent model-mismatch checks that fired: check -> first evidence
    for s, price in zip(steps, pricers, strict=True):
        for check, warning in (*check_collectives(s, scenario, priced[price]), *check_shape(s, scenario)):
            warnings.append(warning)
            evidence.setdefault(check, warning)
    refuse_another_model(breakdown, scenario, evidence)


def _fit_classes(steps: list[StepBreakdown], measured: list[dict[str, float]], scenario: Scenario,
                 shapes: PricedSteps) -> tuple[Efficiency, dict[str, str]]:
    """One knob per kernel class, fitted to the summed measured class time (module docstring). The trace's own
    kernel times replace aiconfigurator's per-op curves: the knobs are fitted on the roofline path, which the
    calibrated model then prices with."""
    prefill_heavy = sum(1 for s in steps if s.kind == "prefill") * 2 >= len(steps)
    eff, knobs = scenario.efficiency.scaled(op_curves=0.0), {}
    for cls in CLASSES:
        target = sum(m[cls] for m in measured)
        if target > 0:
            eff, knobs[cls] = fit_class(cls, target, eff, scenario, shapes, prefill_heavy)
    return eff, knobs


def _calibrated_steps(steps: list[StepBreakdown], measured: list[dict[str, float]],
                      predicted: list[dict[str, float]], ctx: float) -> tuple[CalibratedStep, ...]:
    return tuple(CalibratedStep(s.index, s.kind, s.tokens, s.batch_size, m, p, ctx if s.kind == "decode" else None,
                                _idle_share(s)) for s, m, p in zip(steps, measured, predicted, strict=True))


def _step_gap(b: TraceBreakdown | StepBreakdown, chosen: list[StepBreakdown]) -> tuple[float | None, int]:
    """Median GPU idle (s) from each calibrated step's last GPU end to the next step's first GPU start in the trace
    (0 where they overlap), over the calibrated steps that have a next step; (None, 0) without one."""
    from servescope.analysis.breakdown import gaps_after_steps_us

    if not is_trace(b):
        return None, 0
    picked = {s.index for s in chosen}
    gaps = [g for s, g in gaps_after_steps_us(b.steps) if s.index in picked]
    return (us_to_s(median(gaps)), len(gaps)) if gaps else (None, 0)


def _idle_share(s: StepBreakdown) -> float | None:
    span = s.gpu_span_us * max(1, s.devices)
    return min(1.0, max(0.0, s.idle_us / span)) if span > 0 else None


def _choose_steps(b: TraceBreakdown | StepBreakdown, step: int | None) -> list[StepBreakdown]:
    if is_step(b):
        return [b]
    assert is_trace(b)
    if step is not None:
        for s in b.steps:
            if s.index == step:
                return [s]
        raise PlanError(f"{b.file}: no step {step}; steps are {', '.join(str(s.index) for s in b.steps)}")
    usable = [s for s in b.steps if s.kind in ("prefill", "decode")]
    if not usable:
        kinds = ", ".join(sorted({s.kind for s in b.steps})) or "none"
        raise PlanError(f"{b.file}: no prefill or decode step to calibrate on (step kinds: {kinds})")
    return usable


def _measured(s: StepBreakdown) -> dict[str, float]:
    """Seconds per class on one device; `overhead` = span minus the four priced classes; `step` = span."""
    dev = max(1, s.devices)
    out = {c: us_to_s(s.classes_us.get(c, 0.0) / dev) for c in CLASSES[:4]}
    span = us_to_s(s.gpu_span_us)
    out["overhead"] = max(0.0, span - sum(out.values()))
    out["step"] = span
    return out


def _pricer(s: StepBreakdown, sc: Scenario, warnings: list[str], context_len: float | None) -> StepPricer:
    if s.kind == "prefill":
        return StepPricer("prefill", int(s.tokens or 1), int(s.batch_size or 1))
    batch = int(s.batch_size or 1)
    per_seq = int(s.tokens // batch) if s.tokens else 1
    ctx = context_len if context_len is not None else sc.isl + sc.osl / 2.0
    if context_len is None:
        warnings.append(f"step {s.index}: context length not in the trace; assumed isl + osl/2 = {ctx:.0f} tokens")
    return StepPricer("decode", max(1, per_seq), batch, ctx)


# The perfmodel's launch_overhead_s defaults are 8-30 µs per kernel; a fitted gap above this threshold (a planner
# assumption) is more than the launch itself, typically profiler overhead.
LAUNCH_BOUND_S = 50e-6


def _eff_warnings(eff: Efficiency, knobs: dict[str, str]) -> list[str]:
    out = []
    if knobs.get("overhead") == "launch_overhead_s" and eff.launch_overhead_s > LAUNCH_BOUND_S:
        out.append(f"overhead: {eff.launch_overhead_s * 1e6:.0f} µs of GPU idle per kernel launch: the step is "
                   "launch-bound; profiling with stacks/shapes inflates CPU launch time, so compare with an "
                   "unprofiled run before planning on it")
    for cls, knob in knobs.items():
        value = knob_value(eff, knob)
        if knob.endswith("_eff") and value > 1.0:
            out.append(f"{cls}: fitted {knob} = {value:.2f} > 1: the model over-counts this class's work")
        elif knob.endswith("_eff") and value > NEAR_PEAK:
            out.append(f"{cls}: fitted {knob} = {value:.2f} is above {NEAR_PEAK:.0%} of the peak, more than real "
                       "kernels reach: the model probably misses work elsewhere in this class")
        if knob == "collective_latency_scale" and value > PROFILED_LATENCY_SCALE:
            out.append(f"{cls}: profiled or eager step: per-call collective cost {value:.1f}x the measured curve for "
                       "its message size; a profiler (shapes, stacks) or an eager step inflates it, so the fitted "
                       "latency scale — and the all-reduce tracks priced on it — overstate what a served graph-mode "
                       "step pays: calibrate on an unprofiled CUDA-graph trace, or give the served TPOT and "
                       "all-reduce share with --measured")
        if knob == "collective_bw_scale" and value > 1.0 + 1e-6:
            out.append(f"{cls}: fitted collective bandwidth {value:.2f}x the measured curve: faster than the "
                       "collective measured alone, so the model probably over-counts bytes or calls")
        if knob.endswith("_eff") and value <= EFF_RANGE[0] * 1.01:
            out.append(f"{cls}: fitted {knob} hit its floor {EFF_RANGE[0]}: the model misses most of this time")
    return out


def _per_call(steps: list[StepBreakdown]) -> dict[str, float]:
    out: dict[str, float] = {}
    for cls in ("norm", "attention", "communication", "gemm", "moe"):
        calls = sum(s.class_calls.get(cls, 0) for s in steps)
        time_us = sum(s.classes_us.get(cls, 0.0) for s in steps)
        if calls:
            out[cls] = us_to_s(time_us / calls)
    return out


def _attention_blocks(steps: list[StepBreakdown]) -> float | None:
    """Duration-weighted blocks per SM of the attention kernels among each step's top kernels."""
    weighted, total = 0.0, 0.0
    for s in steps:
        for k in s.top_kernels:
            if k.kernel_class == "attention" and k.blocks_per_sm is not None:
                weighted += k.blocks_per_sm * k.total_us
                total += k.total_us
    return weighted / total if total else None


def calibration_table(cal: Calibration) -> list[dict[str, str | float | None]]:
    """Rows per class: measured µs, model µs, residual, knob and its fitted value (for reports)."""
    rows: list[dict[str, str | float | None]] = []
    for cls in (*CLASSES, "step"):
        if cls not in cal.measured_s:
            continue
        knob = cal.knobs.get(cls)
        rows.append({"class": cls, "measured_us": s_to_us(cal.measured_s[cls]),
                     "model_us": s_to_us(cal.predicted_s[cls]), "residual": cal.residuals.get(cls),
                     "knob": knob, "value": knob_value(cal.efficiency, knob) if knob else None})
    if cal.step_gap_s is not None:  # the CPU time between steps: measured, and the model's after calibration
        eff = cal.efficiency
        model = eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * (cal.steps[0].batch or 1) if cal.steps else 0.0
        rows.append({"class": "cpu (between)", "measured_us": s_to_us(cal.step_gap_s), "model_us": s_to_us(model),
                     "residual": (model - cal.step_gap_s) / cal.step_gap_s if cal.step_gap_s > 0 else None,
                     "knob": "cpu_overhead_s" if cal.cpu_measured else None,
                     "value": eff.cpu_overhead_s if cal.cpu_measured else None})
    return rows
