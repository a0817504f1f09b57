"""The `kernel_tuning` track: what tuning kernels that run well below a measured reference would pay (issue 19 part 4).

Does: read the per-kernel numbers a trace gave (`KernelEvidence`, built by advise from the analysis: each kernel's
measured µs against the measured reference's µs for the same work; the planner reads no trace) and:
  gain        the step time given back if the named kernels ran at their reference: per step kind, Σ (measured −
              reference) of the kernels at ≥ 2× their reference, never more than those kernels' own time. On the model
              (`KernelTuning`): each model class (gemm, moe, attention) of that step kind loses the same share of its
              time as the measured class lost, so the saving follows the class's time to other batches and
              concurrencies (assumption: the named kernels keep their share of the class).
  preconditions  which tuned configs or kernels exist for the kernels' op, dtype, GPU and engine (planner/data/
              tuning.toml, each with its source and any measured caution), else "write a kernel".
  verify      each named kernel's µs per call in a new trace, against its reference.
When every kernel with a reference already runs within 2× of it the track does not apply and says "no gain from
tuning" with the numbers.
Does not: find the kernels (analysis.headroom), price kernels without a measured reference, or tune anything.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from servescope.perfmodel.scenario import Scenario
from servescope.planner.kernels import KernelEvidence, KernelRow
from servescope.planner.track import EFFORTS, Context, Proposal, not_applicable
from servescope.planner.whatif import StepView, WhatIf

MODEL_CLASSES = ("gemm", "moe", "attention")  # trace classes the performance model prices as classes of its own


@dataclass(frozen=True)
class KernelTuning:
    """Step adjustment: per (step kind, model class), that share of the class's time is given back."""

    fractions: tuple[tuple[str, str, float], ...]

    def __call__(self, sc: Scenario, view: StepView) -> StepView:
        for kind, cls, frac in self.fractions:
            t = view.class_time_s.get(cls, 0.0)
            if kind != view.kind or t <= 0:
                continue
            mem = "kv" if cls == "attention" else "weights"
            term = mem if view.terms_s.get(mem, 0.0) >= t else "compute"
            view = view.shifted(term, -frac * t, cls=cls)
        return view


def fractions(ev: KernelEvidence) -> tuple[tuple[str, str, float], ...]:
    """(kind, model class, Σ saved ÷ the class's measured µs) for the tunable kernels, each share ≤ 1."""
    out = []
    for k in ev.kinds:
        for cls in MODEL_CLASSES:
            saved = sum(r.saved_us for r in ev.rows if r.tunable and r.kind == k.kind and r.kernel_class == cls)
            measured = k.class_us.get(cls, 0.0)
            if saved > 0 and measured > 0:
                out.append((k.kind, cls, min(1.0, saved / measured)))
    return tuple(out)


@lru_cache(maxsize=1)
def tuning_options() -> tuple[dict[str, Any], ...]:
    """The bundled options (planner/data/tuning.toml), in file order."""
    text = resources.files("servescope.planner").joinpath("data", "tuning.toml").read_text(encoding="utf-8")
    return tuple(tomllib.loads(text)["option"])


def option_for(row: KernelRow, sc: Scenario) -> dict[str, Any] | None:
    """The first option whose keys (model, dtype, compute_capability, engine) all match the kernel and deployment."""
    facts = {"model": row.model, "dtype": row.dtype, "compute_capability": sc.gpu.compute_capability,
             "engine": sc.backend}
    for opt in tuning_options():
        if all(opt[key] == value for key, value in facts.items() if key in opt):
            return opt
    return None


def _per_call(us: float, calls: int) -> float:
    return us / max(calls, 1)


def _precondition(row: KernelRow, sc: Scenario) -> tuple[str, str]:
    """(effort, sentence) for one tunable kernel."""
    opt = option_for(row, sc)
    what = f"{row.name[:60]} ({row.model or row.kernel_class} {row.dtype or ''}".rstrip() + ")"
    if opt is None:
        return "new kernel", (f"{what}: no tuned config or kernel known to servescope for {sc.gpu.name} / "
                              f"{sc.backend}: a kernel written for this shape")
    caution = f"; caution: {opt['caution']}" if opt.get("caution") else ""
    return str(opt["effort"]), f"{what}: {opt['what']} (source: {opt['source']}{caution})"


def _no_gain(kind: str, rows: list[KernelRow], ev: KernelEvidence) -> Proposal:
    worst = max(rows, key=lambda r: r.headroom or 0.0)
    measured = sum(r.measured_us for r in rows)
    reference = sum(r.achievable_us or 0.0 for r in rows)
    why = (f"no gain from tuning: the {len(rows)} kernels with a measured reference ({measured / 1e3:,.2f} ms) run at "
           f"{reference / measured:.0%} of it, the slowest {worst.headroom or 0.0:.2f}× its reference (below 2×) — "
           f"{worst.name[:60]} ({ev.source})")
    return not_applicable(kind, why, "config change", "", reference=ev.source, measured_us=measured,
                          achievable_us=reference, kernels=len(rows))


def kernel_tuning_track(ctx: Context) -> Proposal:
    kind, ev = "kernel_tuning", ctx.kernels
    if ev is None:
        return not_applicable(kind, "needs a trace: kernel times against a measured per-op reference come from "
                              "`servescope plan TRACE` (record_shapes on)", "config change")
    referenced = [r for r in ev.rows if r.achievable_us is not None]
    if not referenced:
        return not_applicable(kind, f"no kernel with a measured reference to compare: {ev.note or 'none measured'}",
                              "config change")
    tunable = sorted((r for r in referenced if r.tunable), key=lambda r: -r.saved_us)
    if not tunable:
        return _no_gain(kind, referenced, ev)
    pre = [_precondition(r, ctx.scenario) for r in tunable[:4]]
    effort = max((e for e, _ in pre), key=EFFORTS.index)
    per_kind: dict[str, dict[str, float]] = {}
    for k in ev.kinds:
        saved = sum(r.saved_us for r in tunable if r.kind == k.kind)
        named = sum(r.measured_us for r in tunable if r.kind == k.kind)
        if named > 0:
            step = k.span_us / max(k.steps, 1)
            cut = saved / max(k.steps, 1)
            per_kind[k.kind] = {"saved_us_per_step": cut, "kernels_us_per_step": named / max(k.steps, 1),
                                "step_us": step, "gain_on_step": step / max(step - cut, 1e-9)}
    validate = "; ".join(
        f"in a new trace {r.name[:50]} runs ≤ {_per_call(r.achievable_us or 0.0, r.calls):,.1f} µs per call (now "
        f"{_per_call(r.measured_us, r.calls):,.1f} µs, {r.headroom or 0.0:.1f}× the reference)" for r in tunable[:3])
    top = per_kind.get("decode") or next(iter(per_kind.values()))
    which = "decode" if "decode" in per_kind else next(iter(per_kind))
    note = (f"{len(tunable)} kernel(s) at ≥ 2× the measured reference give back {top['saved_us_per_step']:,.1f} µs per "
            f"{which} step ({top['saved_us_per_step'] / top['step_us']:.1%} of it) at their reference")
    if "decode" not in per_kind:
        note += "; no decode kernels were measured: the decode objective is unchanged"
    details = {"reference": ev.source, "per_kind": per_kind, "kernels": [
        {"name": r.name, "kind": r.kind, "class": r.kernel_class, "calls": r.calls, "headroom": r.headroom,
         "measured_us_per_call": _per_call(r.measured_us, r.calls),
         "achievable_us_per_call": _per_call(r.achievable_us or 0.0, r.calls),
         "saved_us_per_step": r.saved_us / max(r.steps, 1)} for r in tunable]}
    whatif = WhatIf(kind, adjust=KernelTuning(fractions(ev)))
    return Proposal(kind, True, None, effort, tuple(p for _, p in pre), validate, whatif=whatif, note=note,
                    details=details)
