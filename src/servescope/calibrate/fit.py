"""The calibration's solver: price measured steps with the perfmodel and fit one efficiency knob per kernel class.

Does: `StepPricer` (one measured step's shape: prefill tokens and batch, or decode batch, context and tokens per
sequence) and `PricedSteps` (model seconds per class for many steps under any efficiency), and `fit_class`
(bisection per knob, the knob that moves least wins). The perfmodel splits a step into efficiency-free parts
(`perfmodel.step.step_parts`) and their combination under an efficiency (`combine_step`): `prefill_step` and
`decode_step` are exactly that pair. The fit changes only the efficiency, so each distinct step shape's parts are
built once and every evaluation only recombines them (a trace's steps also repeat shapes — a steady decode batch, a
chunked-prefill chunk); class totals sum the per-step values in step order. The numbers are bit-for-bit those of
pricing every step with prefill_step/decode_step at every evaluation (tests/calibrate/test_calibrate_fit.py checks it).
Does not: read traces, check that a trace fits the scenario, or write warnings (servescope.calibrate does).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servescope.perfmodel import Efficiency, Scenario, StepPrediction, decode_step, prefill_step
from servescope.perfmodel.step import StepParts, combine_step, step_parts

CLASSES = ("gemm", "moe", "attention", "communication", "overhead")
EFF_RANGE = (0.005, 1.5)
SCALE_RANGE = (0.02, 50.0)
OVERHEAD_RANGE = (0.0, 5e-3)
BISECTION_STEPS = 60


@dataclass(frozen=True)
class StepPricer:
    """The shape of one measured step, priced by the perfmodel. Prefill: `tokens` in all over `batch` sequences
    from empty context. Decode: `batch` sequences at `context_len` tokens each, `tokens` = tokens per sequence."""

    kind: str  # "prefill" or "decode"
    tokens: int
    batch: int
    context_len: float = 0.0

    def __call__(self, sc: Scenario) -> StepPrediction:
        """The full prediction (collectives included) under sc's efficiency; checks the shape."""
        if self.kind == "prefill":
            return prefill_step(sc, self.tokens, batch=self.batch, context_len=0)
        return decode_step(sc, self.batch, self.context_len, tokens_per_seq=self.tokens)  # type: ignore[arg-type]

    def parts(self, sc: Scenario) -> StepParts:
        """The efficiency-free parts, with the very arguments prefill_step / decode_step pass."""
        if self.kind == "prefill":
            return step_parts(sc, self.batch, 0, self.tokens / self.batch, prefill=True)
        return step_parts(sc, self.batch, self.context_len, self.tokens)


def step_classes(pred: StepPrediction) -> dict[str, float]:
    """Model seconds per class as a trace sees them: the per-step CPU time (perfmodel class `host`: scheduler,
    sampling) happens between GPU spans, so it is left out of `overhead` and `step`."""
    out = {c: float(pred.class_time_s.get(c, 0.0)) for c in CLASSES[:4]}
    cpu = float(pred.class_time_s.get("host", 0.0))
    out["overhead"] = max(0.0, float(pred.terms_s.get("overhead", 0.0)) - cpu)
    out["step"] = float(pred.step_time_s) - cpu
    return out


def _parts_classes(parts: StepParts, eff: Efficiency) -> dict[str, float]:
    """step_classes of the prediction that `parts` under `eff` make (the same floats: a StepPrediction's class
    times, CPU time, overhead term and step time are element 0 of combine_step's arrays)."""
    a = combine_step(parts, eff)
    out = {c: float(a[c].ravel()[0]) for c in CLASSES[:4]}
    cpu = float(a["cpu"].ravel()[0])
    out["overhead"] = max(0.0, float(a["overhead"].ravel()[0]) - cpu)
    out["step"] = float(a["step"].ravel()[0]) - cpu
    return out


class PricedSteps:
    """Steps priced under any efficiency: each distinct shape's parts built once, for one scenario's layout."""

    def __init__(self, pricers: Sequence[StepPricer], sc: Scenario):
        self.pricers = tuple(pricers)
        self._parts = {p: p.parts(sc) for p in dict.fromkeys(self.pricers)}

    def classes(self, eff: Efficiency) -> list[dict[str, float]]:
        """Model seconds per class (as step_classes) for each step, in order."""
        per_shape = {p: _parts_classes(parts, eff) for p, parts in self._parts.items()}
        return [dict(per_shape[p]) for p in self.pricers]

    def total(self, cls: str) -> Callable[[Efficiency], float]:
        """total(eff) = the model's seconds of class `cls` summed over the steps, in step order."""
        def total(e: Efficiency) -> float:
            per_shape = {p: _parts_classes(parts, e)[cls] for p, parts in self._parts.items()}
            return sum(per_shape[p] for p in self.pricers)
        return total


def knobs_for(cls: str, sc: Scenario, prefill_heavy: bool) -> list[str]:
    """Knobs to try for a class, preferred first."""
    pairs = {"gemm": ("compute_eff", "gemm_bw_eff"), "moe": ("moe_compute_eff", "moe_bw_eff"),
             "attention": ("attn_compute_eff", "attn_bw_eff")}
    if cls in pairs:
        compute, bw = pairs[cls]
        return [compute, bw] if prefill_heavy else [bw, compute]
    if cls == "communication":
        return ["collective_bw_scale", "collective_latency_scale"]
    return ["kernel_overhead_s" if sc.cuda_graphs else "launch_overhead_s"]


def knob_value(eff: Efficiency, knob: str) -> float:
    """The value of one fitted knob (an Efficiency field named in `knobs_for`)."""
    return float(getattr(eff, knob))


def fit_class(cls: str, target_s: float, eff: Efficiency, sc: Scenario, priced: PricedSteps,
              prefill_heavy: bool) -> tuple[Efficiency, str]:
    """The efficiency with one knob of `cls` refitted so that the class total reaches `target_s` seconds, and
    the knob's name. Among the knobs that reach it (within 1 %), the one that moves least from its prior value
    (|log ratio|) wins: the most plausible explanation; otherwise the one that comes closest."""
    total = priced.total(cls)
    if cls == "gemm":  # the trace's own GEMM time replaces a measured GEMM curve (perfmodel/gemm_curve.py)
        eff = eff.scaled(gemm_curve=0.0)
    knobs = knobs_for(cls, sc, prefill_heavy)
    if cls == "communication":
        knobs = _comm_order(eff, total)
    best: tuple[tuple[int, float], Efficiency, str] | None = None
    for knob in knobs:
        e = _solve(knob, target_s, eff, total)
        err = abs(total(e) - target_s) / target_s
        change = abs(math.log(max(knob_value(e, knob), 1e-12) / max(knob_value(eff, knob), 1e-12)))
        score = (0, change) if err < 0.01 else (1, err)
        if best is None or score < best[0]:
            best = (score, e, knob)
    assert best is not None
    return best[1], best[2]


def _comm_order(eff: Efficiency, total: Callable[[Efficiency], float]) -> list[str]:
    """Bandwidth scale first when the bandwidth part of the model's collective time dominates."""
    full = total(eff)
    latency_only = total(eff.scaled(collective_bw_scale=1e9))
    bw_part = full - latency_only
    return (["collective_bw_scale", "collective_latency_scale"] if bw_part > latency_only
            else ["collective_latency_scale", "collective_bw_scale"])


def _solve(knob: str, target_s: float, eff: Efficiency, total: Callable[[Efficiency], float]) -> Efficiency:
    """Bisection (log space; linear for overheads that may be 0) for total(eff with knob) = target_s, at most
    BISECTION_STEPS halvings. Once the midpoint rounds to an end of the bracket (adjacent floats), the end it
    keeps is that midpoint whichever side the next halving takes, so the loop stops there with the same result."""
    lo, hi = (EFF_RANGE if knob.endswith("_eff") else SCALE_RANGE if knob.endswith("_scale")
              else OVERHEAD_RANGE)
    increasing = knob in ("collective_latency_scale", "kernel_overhead_s", "launch_overhead_s")
    log = lo > 0
    for _ in range(BISECTION_STEPS):
        mid = (lo * hi) ** 0.5 if log else (lo + hi) / 2
        if mid in (lo, hi) and ((mid * mid) ** 0.5 if log else (mid + mid) / 2) == mid:
            break  # either branch ends at a bracket whose midpoint is mid forever: the result is mid
        t = total(eff.scaled(**{knob: mid}))
        too_slow = t > target_s
        if too_slow == increasing:
            hi = mid
        else:
            lo = mid
    return eff.scaled(**{knob: (lo * hi) ** 0.5 if log else (lo + hi) / 2})

