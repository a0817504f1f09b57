"""A plan scored against what was measured after it was applied (`servescope verify`).

Does: take what a plan predicted (`PlanPrediction`, read from a `plan/1` document's fields by
`plan_prediction`, which names the file and the missing key of a bad one) and two measurements of its
objective, before and after the change (`Measured`, in SI: TPOT in seconds or output tokens/s), and score each
applied track: the measured gain (TPOT: before / after; throughput: after / before; > 1 is better, as the
plan's gains) against the predicted 80 % range: `inside`, `above` (better than the range's top) or `below`.
Which tracks were applied: named (`applied`; `combined` names the combination the plan chose), or, when not named,
found from what changed between a before and an after trace (planner.applied: each found track with the evidence
that named it; a found track the plan cannot score is said and left out). Benchmark files and typed figures do not
say how the engine ran: without `applied` they are refused, asking for it. One applied
track is scored against its own gain and range (basis `track`). Several applied tracks are scored together,
since one measurement cannot split a gain between them, as ONE change between two deployments:
  plan_combined  the applied set is the plan's combination: its combined gain (interactions priced by the plan);
  product        any other set: the product of the tracks' gains (the plan priced no interaction between them);
and the range is that gain × the widest relative range (low/gain, high/gain) among the plan's range rule applied
to that gain (planner.gain_range: the error of a predicted ratio of two deployments, which does not grow with the
size of the change) and each applied track's own range (speculative decoding has a wider, measured one of its
own). Multiplying the tracks' range ends instead would assume every error points the same way: an 80 % range
four tracks wide would span 0.7–5x and score nothing.
Does not: read files or measure (servescope.advise measures; servescope.report reads the plan file and makes the
document).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servescope.errors import PlanError
from servescope.planner.applied import EngineView, Found, found_changes
from servescope.planner.gain_range import BASES, PlanRange
from servescope.units import ms_to_s

Verdict = Literal["inside", "above", "below"]
Basis = Literal["track", "plan_combined", "product"]
OBJECTIVES = ("tpot", "throughput")
COMBINED = "combined"  # --applied combined: the combination the plan chose
AppliedFrom = Literal["named", "found", "plan_combined"]
BASIS_TEXT: dict[str, str] = {
    "track": "the track's own predicted gain and 80% range",
    "plan_combined": "the plan's combined gain for these tracks, its range the widest relative range of the plan's "
                     "range rule and the tracks' own (one change, one ratio error)",
    "product": "the product of the tracks' predicted gains (no interaction priced between them), its range the "
               "widest relative range of the plan's range rule and the tracks' own (one change, one ratio error)",
}


@dataclass(frozen=True)
class PlannedTrack:
    """One track as the plan predicted it; gain and range are None when it does not apply."""

    kind: str
    gain: float | None
    gain_low: float | None
    gain_high: float | None
    why_not: str | None = None


@dataclass(frozen=True)
class PlanPrediction:
    """What a plan document predicted: the objective at a concurrency, its tracks, its chosen combination."""

    source: str  # the plan file
    objective: str  # tpot | throughput
    concurrency: int
    tracks: tuple[PlannedTrack, ...]
    combined_tracks: tuple[str, ...]
    combined_gain: float
    baseline_tpot_s: float
    baseline_output_tok_s: float
    range_basis: str  # the plan's range.basis: cross_validated | cross_step | rule_of_thumb
    range_ratio_q: tuple[float, float] | None = None  # range.gain_ratio_q10, q90 (basis cross_validated)
    range_r: float | None = None  # range.r (bases cross_step, rule_of_thumb)
    baseline_basis: str = "modelled"  # baseline.basis: what the plan's baseline rests on (planner.basis)
    baseline_tpot_range_s: tuple[float, float] | None = None  # range.baseline_tpot_ms_low, high (80 %)
    applied: tuple[str, ...] = ()  # the tracks already applied when the plan was made (plan/1 `applied`)

    def change_range(self, gain: float) -> tuple[float, float]:
        """The plan's range rule (planner.gain_range.PlanRange.gain) for one change of predicted `gain`."""
        rule = PlanRange(self.range_basis, "", "", ratio_q=self.range_ratio_q, r=self.range_r)
        return rule.gain(gain, gain)

    def track(self, kind: str) -> PlannedTrack:
        found = next((t for t in self.tracks if t.kind == kind), None)
        if found is None:
            raise PlanError(f"{self.source}: no track {kind!r} in the plan; its tracks: "
                            f"{', '.join(t.kind for t in self.tracks)}")
        return found


@dataclass(frozen=True)
class Measured:
    """One measurement of the objective: `value` in SI (TPOT in s, or output tokens/s), where it came from."""

    value: float
    source: str  # the file or the typed figure
    detail: str  # how the value was taken (e.g. "mean decode step span over 6 decode steps of rank 0")
    kind: str  # trace | benchmark | figure
    concurrency: int | None = None  # the load it was measured at, when known
    warnings: tuple[str, ...] = ()
    device: str | None = None  # the GPU a trace ran on, when it says
    facts: EngineView | None = None  # how a trace's engine ran (analysis.engine_facts), to find what changed


@dataclass(frozen=True)
class Check:
    """The measured gain of the applied tracks against their predicted range."""

    tracks: tuple[str, ...]
    basis: Basis
    gain: float
    gain_low: float
    gain_high: float
    measured_gain: float
    verdict: Verdict

    @property
    def miss(self) -> float:
        """How far outside the range the measurement is, as a factor ≥ 1 (1.0 inside)."""
        if self.verdict == "above":
            return self.measured_gain / self.gain_high
        if self.verdict == "below":
            return self.gain_low / self.measured_gain
        return 1.0


@dataclass(frozen=True)
class Verification:
    """A plan scored against before/after measurements of its objective."""

    plan: PlanPrediction
    objective: str
    before: Measured
    after: Measured
    applied: tuple[str, ...]
    applied_from: AppliedFrom
    tracks: tuple[PlannedTrack, ...]  # the applied tracks as predicted, in the order given
    check: Check
    warnings: tuple[str, ...] = ()
    found: tuple[Found, ...] = ()  # applied_from "found": each scored track and the evidence that named it

    @property
    def measured_gain(self) -> float:
        return self.check.measured_gain


def measured_gain(objective: str, before: float, after: float) -> float:
    """The gain on the objective: TPOT before / after, or throughput after / before (> 1 is better)."""
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    if not (before > 0 and after > 0 and math.isfinite(before) and math.isfinite(after)):
        raise PlanError(f"a measured {objective} must be positive and finite (before {before}, after {after})")
    return before / after if objective == "tpot" else after / before


def verdict(measured: float, low: float, high: float) -> Verdict:
    """inside when low ≤ measured ≤ high, else above or below."""
    if measured > high:
        return "above"
    if measured < low:
        return "below"
    return "inside"


def _scored(t: PlannedTrack, source: str) -> tuple[float, float, float]:
    if t.gain is None or t.gain_low is None or t.gain_high is None:
        why = f" ({t.why_not})" if t.why_not else ""
        raise PlanError(f"{source}: track {t.kind} has no predicted gain in the plan: not applicable{why}")
    return t.gain, t.gain_low, t.gain_high


def parse_applied(text: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """`k1,k2` (or a list of them) → the track kinds, in order, without repeats; None or empty → None."""
    if text is None:
        return None
    parts = [text] if isinstance(text, str) else list(text)
    kinds = [k.strip() for p in parts for k in p.split(",") if k.strip()]
    return tuple(dict.fromkeys(kinds)) or None


def verify(prediction: PlanPrediction, before: Measured, after: Measured,
           applied: Sequence[str] | None = None) -> Verification:
    """Score the applied tracks (module docstring); PlanError for an unknown or inapplicable track, when nothing
    was named and nothing can be found, or when `combined` is named and the plan chose nothing."""
    objective = prediction.objective
    gain = measured_gain(objective, before.value, after.value)
    named = tuple(dict.fromkeys(applied)) if applied else ()
    notes: list[str] = []
    found: tuple[Found, ...] = ()
    applied_from: AppliedFrom = "named"
    if named == (COMBINED,):
        if not prediction.combined_tracks:
            raise PlanError(f"{prediction.source}: the plan chose no track (nothing pays); name what you applied "
                            "with --applied KIND[,KIND]")
        kinds, applied_from = prediction.combined_tracks, "plan_combined"
    elif named:
        kinds = named
    else:
        found, notes = _found(prediction, before, after)
        kinds, applied_from = tuple(f.kind for f in found), "found"
    tracks = tuple(prediction.track(k) for k in kinds)
    priced = [_scored(t, prediction.source) for t in tracks]
    if len(tracks) == 1:
        basis: Basis = "track"
        g, lo, hi = priced[0]
    else:
        if set(kinds) == set(prediction.combined_tracks):
            basis, g = "plan_combined", prediction.combined_gain
        else:
            basis, g = "product", math.prod(p[0] for p in priced)
        rule_lo, rule_hi = prediction.change_range(g)
        rel_lo = min(rule_lo / g, *(p[1] / p[0] for p in priced))
        rel_hi = max(rule_hi / g, *(p[2] / p[0] for p in priced))
        lo, hi = g * rel_lo, g * rel_hi
    check = Check(kinds, basis, g, lo, hi, gain, verdict(gain, lo, hi))
    return Verification(prediction, objective, before, after, kinds, applied_from, tracks, check,
                        (*notes, *_warnings(prediction, before, after, kinds)), found)


def _found(p: PlanPrediction, before: Measured, after: Measured) -> tuple[tuple[Found, ...], list[str]]:
    """The tracks found applied between two traces that the plan can score, and notes on the rest; PlanError when
    a side is not a trace or nothing scorable changed."""
    ask = f"name what you applied with --applied KIND[,KIND] (or --applied {COMBINED}: the plan's choice"
    ask += f", {' + '.join(p.combined_tracks)})" if p.combined_tracks else ")"
    if before.facts is None or after.facts is None:
        words = {"benchmark": "benchmark result file", "figure": "typed figure", "trace": "trace"}
        what = " or ".join(sorted({words.get(m.kind, m.kind) for m in (before, after) if m.facts is None}))
        raise PlanError(f"nothing says which tracks were applied: a {what} measures the objective, not how the "
                        f"engine ran (only a before and an after trace show what changed); {ask}")
    forward, reverse = found_changes(before.facts, after.facts)
    kinds = {t.kind: t for t in p.tracks}
    scorable = tuple(f for f in forward if f.kind in kinds and kinds[f.kind].gain is not None)
    notes = [f"found {f.kind} ({f.evidence}) but the plan "
             + (f"has no gain for it: not applicable ({kinds[f.kind].why_not})" if f.kind in kinds
                else "has no such track") + "; not scored"
             for f in forward if f not in scorable]
    notes += [f"the traces change the other way from {f.kind} (read after → before: {f.evidence}); not scored"
              for f in reverse]
    if not scorable:
        seen = "; ".join(notes) if notes else ("none of the changes servescope recognises (CUDA graphs, "
                                               "speculative decoding, the all-reduce kernel, GEMM dtypes, fused "
                                               "norms, the rank count, all-to-all)")
        raise PlanError(f"{before.source} → {after.source}: no applied track found to score: {seen}; {ask}")
    return scorable, notes


def _warnings(p: PlanPrediction, before: Measured, after: Measured, kinds: Sequence[str]) -> tuple[str, ...]:
    out = [*(f"before: {w}" for w in before.warnings), *(f"after: {w}" for w in after.warnings)]
    for side, m in (("before", before), ("after", after)):
        if m.concurrency is not None and m.concurrency != p.concurrency:
            out.append(f"{side} was measured at concurrency {m.concurrency}, the plan predicts concurrency "
                       f"{p.concurrency}")
    if before.concurrency in (None, p.concurrency):
        from servescope.planner.campaign import off_baseline

        tpot = p.objective == "tpot"
        lo, hi = p.baseline_tpot_range_s if tpot and p.baseline_tpot_range_s else (None, None)
        off = off_baseline(p.objective, p.baseline_tpot_s if tpot else p.baseline_output_tok_s, before.value,
                           p.baseline_basis, lo, hi)
        out += [off] if off else []
    if "speculative_decoding" in kinds and "trace" in (before.kind, after.kind):
        out.append("a speculative decoding step emits several tokens, so a trace's step time is not its TPOT; "
                   "measure TPOT (a benchmark file or a typed figure such as tpot=9.2ms@c1)")
    return tuple(out)


# --- the plan document's fields --------------------------------------------------------------------------------

def _get(doc: Mapping[str, Any], key: str, source: str, where: str = "") -> Any:
    if not isinstance(doc, Mapping) or key not in doc:
        raise PlanError(f"{source}: not a plan document: missing key {where}{key} (write one with "
                        "`servescope plan … --json -o plan.json`)")
    return doc[key]


def _number(doc: Mapping[str, Any], key: str, source: str, where: str = "", none: bool = False) -> float | None:
    v = _get(doc, key, source, where)
    if v is None and none:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise PlanError(f"{source}: {where}{key} must be a positive number, got {v!r}")
    return float(v)


def _required(doc: Mapping[str, Any], key: str, source: str, where: str) -> float:
    v = _number(doc, key, source, where)
    assert v is not None  # _number raises on None unless none=True
    return v


def plan_prediction(doc: Mapping[str, Any], source: str) -> PlanPrediction:
    """The prediction of a decoded `plan/1` document (the caller checks its schema); PlanError naming the file and
    the first missing or bad key."""
    objective = _get(doc, "objective", source)
    if objective not in OBJECTIVES:
        raise PlanError(f"{source}: objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    conc = _get(doc, "concurrency", source)
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise PlanError(f"{source}: concurrency must be a positive integer, got {conc!r}")
    raw_tracks = _get(doc, "tracks", source)
    if not isinstance(raw_tracks, list):
        raise PlanError(f"{source}: tracks must be a list")
    tracks = []
    for i, t in enumerate(raw_tracks):
        where = f"tracks[{i}]."
        kind = _get(t, "kind", source, where)
        nums = [_number(t, k, source, where, none=True) for k in ("gain", "gain_low", "gain_high")]
        why = t.get("why_not")
        tracks.append(PlannedTrack(str(kind), nums[0], nums[1], nums[2], why if isinstance(why, str) else None))
    combined = _get(doc, "combined", source)
    chosen = _get(combined, "tracks", source, "combined.")
    if not isinstance(chosen, list) or not all(isinstance(k, str) for k in chosen):
        raise PlanError(f"{source}: combined.tracks must be a list of track kinds")
    baseline = _get(doc, "baseline", source)
    rng = _get(doc, "range", source)
    basis = _get(rng, "basis", source, "range.")
    q10, q90 = (_number(rng, k, source, "range.", none=True) for k in ("gain_ratio_q10", "gain_ratio_q90"))
    r = _number(rng, "r", source, "range.", none=True)
    if basis not in BASES or basis == "cross_validated" and (q10 is None or q90 is None):
        raise PlanError(f"{source}: range.basis {basis!r} needs range.gain_ratio_q10 and q90 (bases: "
                        f"{', '.join(BASES)})" if basis == "cross_validated" else
                        f"{source}: range.basis must be one of {', '.join(BASES)}, got {basis!r}")
    return PlanPrediction(
        source=source, objective=str(objective), concurrency=conc, tracks=tuple(tracks),
        combined_tracks=tuple(chosen), combined_gain=_required(combined, "gain", source, "combined."),
        baseline_tpot_s=ms_to_s(_required(baseline, "tpot_ms", source, "baseline.")),
        baseline_output_tok_s=_required(baseline, "output_tok_s", source, "baseline."),
        range_basis=str(basis), range_ratio_q=None if q10 is None or q90 is None else (q10, q90), range_r=r,
        baseline_basis=_baseline_basis(doc, baseline, source), baseline_tpot_range_s=_baseline_range(rng, source),
        applied=tuple(k for k in _list(doc.get("applied")) if isinstance(k, str)))


def _list(value: Any) -> list[Any]:
    """A list field of a plan file, [] when absent or not a list (a number there is no track)."""
    return value if isinstance(value, list) else []


def _baseline_range(rng: Mapping[str, Any], source: str) -> tuple[float, float] | None:
    keys = ("baseline_tpot_ms_low", "baseline_tpot_ms_high")
    if not all(k in rng for k in keys):  # a plan written before the key
        return None
    lo, hi = (_number(rng, k, source, "range.", none=True) for k in keys)
    return None if lo is None or hi is None else (ms_to_s(lo), ms_to_s(hi))


def _baseline_basis(doc: Mapping[str, Any], baseline: Mapping[str, Any], source: str) -> str:
    """baseline.basis of the plan (planner.basis.BASES); a plan written before the key: calibrated or modelled."""
    from servescope.planner.basis import BASES as NUMBER_BASES

    got = baseline.get("basis") if isinstance(baseline, Mapping) else None
    if got is None:
        return "calibrated" if doc.get("calibrated") is True else "modelled"
    if got not in NUMBER_BASES:
        raise PlanError(f"{source}: baseline.basis must be one of {', '.join(NUMBER_BASES)}, got {got!r}")
    return str(got)
