"""The plan: evaluate every mitigation track, rank them, combine the compatible ones, state the ceiling and a
verdict on the target.

Does: `plan(scenario, objective, concurrency, target, forbid, calibration, spec)` →
  1. baseline on the objective (TPOT at the concurrency, or decode throughput under a TPOT limit),
  2. each track (independent, evaluated in parallel threads, kept in TRACK_KINDS order), its gain on the objective
     (baseline TPOT / new TPOT, or new / baseline throughput) with a range from acceptance bounds and measured
     error (planner.gain_range: cross-validated error of a predicted ratio on one box, a calibration's cross-step
     error, or — only where nothing measured applies — a labelled rule of thumb),
  3. a greedy combination of compatible tracks that pay (each added only if the combination improves),
  4. the ceiling: the combination at 100% efficiency, no launch/CPU overhead, no prefill interference, on the
     plan's own step model (a calibrated plan's levels included), never worse than the combination, and its
     binding (largest) term; beside it the physical floor of its step (perfmodel step.py `floor_s`, as `model`
     prints it: one function),
  5. the target verdict: reachable with which tracks, or "not reachable" and by how far.
The records it returns (Track, Combination, Ceiling, Verdict, Plan; PAYS) live in planner.plan_records and are
re-exported here.
Does not: render anything (see servescope.report.plan_doc / plan_text) or read traces (see servescope.calibrate).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from servescope.calibrate import Calibration
from servescope.calibrate.figure_fit import FigureFit
from servescope.errors import PlanError
from servescope.perfmodel.scenario import Scenario
from servescope.planner.basis import Bases, basis_at, what_if_basis
from servescope.planner.campaign import applied_proposal, apply_tracks
from servescope.planner.gain_range import PlanRange, plan_range
from servescope.planner.kernels import KernelEvidence
from servescope.planner.measured import (
    LevelledModel,
    measured_range,
    measured_step_of,
    on_measured_step,
)
from servescope.planner.plan_records import PAYS, Ceiling, Combination, Plan, Track, Verdict
from servescope.planner.spec_calibrate import calibrated_spec
from servescope.planner.speculative import SpecConfig
from servescope.planner.target import Target, check_objective, parse_target
from servescope.planner.track import Context, Proposal
from servescope.planner.tracks import TRACK_KINDS, TRACKS, parse_forbid
from servescope.planner.whatif import Change, Evaluator, Outcome, PerfModel, StepModel, WhatIf
from servescope.units import MS_PER_S

# the records are planner.plan_records's, re-exported: callers import them from here
__all__ = ["IDEAL", "PAYS", "Ceiling", "Combination", "Plan", "Track", "Verdict", "combine", "compatible", "plan",
           "point_text"]


def plan(
    scenario: Scenario,
    objective: str = "tpot",
    concurrency: int = 1,
    target: str | Target | None = None,
    forbid: str | tuple[str, ...] | list[str] | None = (),
    calibration: Calibration | None = None,
    spec: SpecConfig | None = None,
    tpot_limit_s: float | None = None,
    model: StepModel | None = None,
    measured: FigureFit | None = None,
    kernels: KernelEvidence | None = None,
    applied: str | tuple[str, ...] | list[str] | None = (),
    option: str | None = None,
) -> Plan:
    """Rank the mitigations for `scenario` on `objective` at `concurrency` (see the module docstring). `measured`:
    the deployment calibrated on the user's figures (its knobs set on the scenario after a trace's calibration, its
    decode levels on every step: planner.measured); the physical ceiling stays unlevelled. `kernels`: the trace's
    per-kernel numbers (advise.kernel_evidence) for the kernel_tuning and split_k_attention tracks. `applied`: tracks
    already applied (planner.campaign): the baseline is the state after them, they are listed as applied and every
    other track is priced on that state. `option`: the one option a track prices instead of its best (the
    quantization track's `kv=fp8`, ...: planner.pair_check hands a ledger row's change); None keeps the best."""
    forbidden, goal = _goal(objective, concurrency, forbid, target)
    given = scenario
    scenario, step_model, measured, spec, spec_note = _calibrated(scenario, calibration, spec, model, measured)
    # A rate target is aggregate output throughput, as benchmarks report it: no per-user cap unless one is given.
    aggregate = goal is not None and goal.aggregate and tpot_limit_s is None
    ctx = _context(step_model, scenario, objective, concurrency, math.inf if aggregate else tpot_limit_s, forbidden,
                   calibration, spec, kernels, parse_forbid(applied), option)
    ev, baseline, scenario, done = ctx.evaluator, ctx.baseline, ctx.scenario, ctx.applied
    r = plan_range(scenario, calibration)
    if measured is not None:
        r = measured_range(r, measured, baseline.concurrency, bool(done))
    measured_step = measured_step_of(calibration)
    proposals, ranked = _ranked(ctx, r, measured_step)
    combined = _combine(ctx, ranked, proposals)
    ceiling = _ceiling(ev, combined, proposals)
    verdict = _verdict(ctx, goal, combined, ceiling, proposals, measured) if goal else None
    bases = _bases(ctx, measured, combined, ceiling, verdict)
    if verdict is not None and goal is not None and goal.aggregate:
        verdict = replace(verdict, per_user=_per_user_reading(given, goal, forbidden, calibration, spec, model,
                                                              measured, kernels, done))
    warnings = (*(calibration.warnings if calibration is not None else ()), *((spec_note,) if spec_note else ()))
    limit = tpot_limit_s if tpot_limit_s is not None else (
        ev.at((), concurrency).tpot_s if objective == "throughput" and not aggregate else None)
    return Plan(scenario, objective, concurrency, calibration is not None or measured is not None, r, baseline,
                ranked, combined, ceiling, verdict, calibration, warnings, spec, measured_step, limit, aggregate,
                measured, step_model if measured is not None else model, kernels=kernels, bases=bases,
                applied=done, applied_whatifs=ev.applied)


def _goal(objective: str, concurrency: int, forbid: str | tuple[str, ...] | list[str] | None,
          target: str | Target | None) -> tuple[tuple[str, ...], Target | None]:
    """The checked inputs: the forbidden tracks and the target (None without one); PlanError (one line) for a
    concurrency below 1 or a target of another objective."""
    check_objective(objective)
    if concurrency < 1:
        raise PlanError(f"concurrency {concurrency} must be >= 1")
    forbidden = parse_forbid(forbid)
    goal = parse_target(target, objective) if isinstance(target, str) else target
    if goal is not None and goal.objective != objective:
        raise PlanError(f"target {goal.text!r} is for objective {goal.objective}, not {objective}")
    return forbidden, goal


def _calibrated(scenario: Scenario, calibration: Calibration | None, spec: SpecConfig | None,
                model: StepModel | None, measured: FigureFit | None,
                ) -> tuple[Scenario, StepModel, FigureFit | None, SpecConfig | None, str]:
    """The scenario after a trace's calibration, then the user's figures (their knobs on the scenario, their
    decode levels on the step model); the speculative config on the measured gain and its note; `measured` None
    unless the figures calibrated the deployment."""
    if calibration is not None:
        scenario = calibration.apply(scenario)
    raw_model = model or PerfModel()
    step_model: StepModel = raw_model
    spec_note = ""
    knobbed = measured.apply(scenario) if measured is not None else scenario
    if measured is not None and measured.spec:  # the speculative track on the measured gain (planner.spec_calibrate)
        spec, spec_note = calibrated_spec(knobbed, spec, measured.spec,
                                          {p.concurrency: p.tpot_s for p in measured.points})
    if measured is not None and measured.calibrated:
        scenario = knobbed
        step_model = LevelledModel(raw_model, measured)
    else:
        measured = None
    return scenario, step_model, measured, spec, spec_note


def _context(step_model: StepModel, scenario: Scenario, objective: str, concurrency: int, limit: float | None,
             forbidden: tuple[str, ...], calibration: Calibration | None, spec: SpecConfig | None,
             kernels: KernelEvidence | None, done: tuple[str, ...], option: str | None = None) -> Context:
    """What every track looks at: the evaluator with the `done` tracks applied (planner.campaign), its baseline and
    the scenario after them."""
    ev = Evaluator(step_model, scenario, objective, concurrency, limit)
    ev = apply_tracks(ev, done, lambda e: Context(e.scenario_of(()), e, e.objective_value(()), objective, concurrency,
                                                  (), calibration, spec, kernels))
    baseline = ev.objective_value(())
    return Context(ev.scenario_of(()), ev, baseline, objective, concurrency, forbidden, calibration, spec, kernels,
                   done, option)


def _ranked(ctx: Context, r: PlanRange, measured_step: dict[str, Any] | None,
            ) -> tuple[dict[str, Proposal], tuple[Track, ...]]:
    """Every track's proposal by kind, and the tracks evaluated (each with its effect on the trace's measured step,
    when there is one) and ranked."""
    proposals = _propose(ctx)
    tracks = [_evaluate(ctx, p, r) for p in proposals]
    if measured_step is not None:
        tracks = [on_measured_step(ctx.evaluator, t, proposals[i], measured_step) for i, t in enumerate(tracks)]
    return {p.kind: p for p in proposals}, tuple(sorted(tracks, key=_rank_key))


def _bases(ctx: Context, measured: FigureFit | None, combined: Combination, ceiling: Ceiling,
           verdict: Verdict | None) -> Bases:
    """What the baseline, the combination, the ceiling and the verdict's point each rest on (planner.basis)."""
    cal = ctx.calibration
    bases = Bases((what_if_basis if ctx.applied else basis_at)(measured, cal, ctx.baseline.concurrency),
                  what_if_basis(measured, cal, combined.outcome.concurrency),
                  what_if_basis(measured, cal, ceiling.outcome.concurrency))
    if verdict is not None and verdict.outcome is not None:
        pick = basis_at if verdict.outcome is ctx.baseline else what_if_basis
        bases = replace(bases, target=pick(measured, cal, verdict.outcome.concurrency))
    return bases


def _propose(ctx: Context) -> list[Proposal]:
    """Run every track (threads: they are independent); forbidden ones are answered without running."""

    def run(kind: str) -> Proposal:
        if kind in ctx.applied:
            return applied_proposal(kind)
        if kind in ctx.forbid and kind != "quantization":  # quantization states its own forbidden record
            return Proposal(kind, False, f"forbidden (--forbid {kind})", "config change", (), "")
        return TRACKS[kind](ctx)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(run, TRACK_KINDS))


def _evaluate(ctx: Context, p: Proposal, r: PlanRange) -> Track:
    base = dict(kind=p.kind, applicable=p.applicable, why_not=p.why_not, effort=p.effort,
                preconditions=p.preconditions, validate=p.validate, precision_lowering=p.precision_lowering,
                note=p.note, details=p.details, whatif=p.whatif)
    if not p.applicable or p.whatif is None:
        return Track(gain=None, gain_low=None, gain_high=None, **base)  # type: ignore[arg-type]
    ev = ctx.evaluator
    out = ev.objective_value((p.whatif,))
    gain = ev.gain(ctx.baseline, out)
    lo_raw, hi_raw = gain, gain
    if p.bounds is not None:
        lo_raw = ev.gain(ctx.baseline, ev.objective_value((p.bounds[0],)))
        hi_raw = ev.gain(ctx.baseline, ev.objective_value((p.bounds[1],)))
    lo, hi = r.track_gain(p.kind, min(lo_raw, gain), max(hi_raw, gain))
    return Track(gain=gain, gain_low=lo, gain_high=hi, tpot_s=out.tpot_s, output_tok_s=out.output_tok_s,
                 **base)  # type: ignore[arg-type]


def _rank_key(t: Track) -> tuple[int, float, int]:
    order = TRACK_KINDS.index(t.kind)
    if t.applicable and t.gain is not None:
        return (0, -t.gain, order)
    return (1, 0.0, order)


def _ordered(whatifs: list[WhatIf]) -> tuple[WhatIf, ...]:
    """Canonical composition order (TRACK_KINDS): the result does not depend on the greedy order."""
    return tuple(sorted(whatifs, key=lambda w: TRACK_KINDS.index(w.kind)))


def compatible(kinds: tuple[str, ...] | list[str], whatifs: dict[str, WhatIf]) -> str | None:
    """None when the tracks can be combined, else the reason (one line)."""
    for a in kinds:
        for b in kinds:
            if a != b and b in whatifs[a].exclusive:
                return f"{a} and {b} both change the parallel layout; pick one"
    return None


def _combine(ctx: Context, ranked: tuple[Track, ...], proposals: dict[str, Proposal]) -> Combination:
    ev = ctx.evaluator
    chosen: list[str] = []
    best, best_gain = ctx.baseline, 1.0
    whatifs = {k: p.whatif for k, p in proposals.items() if p.whatif is not None}
    for t in ranked:
        if not t.pays or compatible([*chosen, t.kind], whatifs) is not None:
            continue
        out = ev.objective_value(_ordered([whatifs[k] for k in [*chosen, t.kind]]))
        g = ev.gain(ctx.baseline, out)
        if g > best_gain * PAYS:
            chosen, best, best_gain = [*chosen, t.kind], out, g
    return Combination(tuple(chosen), best, best_gain)


def combine(p: Plan, kinds: tuple[str, ...] | list[str], model: StepModel | None = None) -> Combination:
    """Evaluate a user-chosen combination of a plan's tracks; PlanError (one line) for unknown, inapplicable,
    forbidden or incompatible tracks."""
    names = parse_forbid(list(kinds))  # same validation: unknown names list the valid ones
    for k in names:
        t = p.track(k)
        if not t.applicable:
            raise PlanError(f"track {k} does not apply: {t.why_not}")
    ev = Evaluator(model or p.step_model or PerfModel(), p.scenario, p.objective, p.concurrency, p.tpot_limit_s,
                   (), p.applied_whatifs)
    ctx = Context(p.scenario, ev, p.baseline, p.objective, p.concurrency, (), p.calibration, p.spec, p.kernels,
                  p.applied)
    proposals = {k: TRACKS[k](ctx) for k in names}
    whatifs = {k: pr.whatif for k, pr in proposals.items() if pr.whatif is not None}
    reason = compatible(list(names), whatifs)
    if reason:
        raise PlanError(f"cannot combine {', '.join(names)}: {reason}")
    out = ev.objective_value(_ordered(list(whatifs.values())))
    return Combination(tuple(names), out, ev.gain(ev.objective_value(()), out))


# Every efficiency at 1, no launch/CPU/prefill overhead or interference: the ceiling. (The "physical floor" is one
# function, the perfmodel's step floor_s that `model` prints; the ceiling's step states its own beside it.)
IDEAL = WhatIf("ideal", scenario=Change.of(
    efficiency={"gemm_bw_eff": 1.0, "moe_bw_eff": 1.0, "attn_bw_eff": 1.0, "compute_eff": 1.0,
                "moe_compute_eff": 1.0, "attn_compute_eff": 1.0, "gemm_curve": 0.0, "kernel_overhead_s": 0.0,
                "launch_overhead_s": 0.0, "cpu_overhead_s": 0.0, "cpu_overhead_per_seq_s": 0.0,
                "prefill_overhead_s": 0.0, "prefill_interference": 0.0},
    efficiency_floor={"collective_bw_scale": 1.0}, efficiency_ceiling={"collective_latency_scale": 1.0}))


def _ceiling(ev: Evaluator, combined: Combination, proposals: dict[str, Proposal]) -> Ceiling:
    """The combination at IDEAL, on the plan's own step model (a calibrated plan's levels included); never worse
    than the combination itself (a bound the combination cannot beat)."""
    whatifs = [proposals[k].whatif for k in combined.tracks]
    out = ev.objective_value((*_ordered([w for w in whatifs if w is not None]), IDEAL))
    if ev.gain(combined.outcome, out) < 1.0:
        out = combined.outcome
    terms = {k: v for k, v in out.step.terms_s.items() if k != "overhead"}
    return Ceiling(combined.tracks, out, max(terms, key=lambda k: terms[k]))


def _verdict(ctx: Context, goal: Target, combined: Combination, ceiling: Ceiling,
             proposals: dict[str, Proposal], fit: FigureFit | None = None) -> Verdict:
    ev = ctx.evaluator

    def value(o: Outcome) -> str:  # each point with the word of its basis (planner.basis)
        word = (basis_at if o is ctx.baseline else what_if_basis)(fit, ctx.calibration, o.concurrency)
        return f"{word} {point_text(o, goal.objective)}"

    if goal.met_by(ctx.baseline.tpot_s, ctx.baseline.output_tok_s):
        return Verdict(goal, True, 1.0, (), f"reachable: the baseline already gives {value(ctx.baseline)}",
                       ctx.baseline)
    for n in range(1, len(combined.tracks) + 1):
        kinds = combined.tracks[:n]
        out = ev.objective_value(_ordered([w for k in kinds if (w := proposals[k].whatif) is not None]))
        if goal.met_by(out.tpot_s, out.output_tok_s):
            return Verdict(goal, True, 1.0, kinds,
                           f"reachable with {', '.join(kinds)}: {value(out)} vs target {goal.text}", out)
    best = combined.outcome
    gap = goal.shortfall(best.tpot_s, best.output_tok_s)
    floor_gap = goal.shortfall(ceiling.outcome.tpot_s, ceiling.outcome.output_tok_s)
    floor = (f"even the ceiling at 100% efficiency ({value(ceiling.outcome)}, bound by {ceiling.binding}) "
             f"misses it by {floor_gap:.2f}x" if floor_gap > 1.0 else
             f"the ceiling at 100% efficiency ({value(ceiling.outcome)}, bound by {ceiling.binding}) would allow "
             "it, beyond the tracks evaluated")
    text = (f"not reachable: the best combination gives {value(best)} vs target {goal.text} "
            f"({gap:.2f}x short); {floor}")
    return Verdict(goal, False, gap, combined.tracks, text, best)


def point_text(o: Outcome, objective: str) -> str:
    """One point as the verdict states it: the objective's value with the concurrency it is reached at (and, for
    throughput, the TPOT each user sees there)."""
    if objective == "tpot":
        return f"{o.tpot_s * 1e3:.3g} ms at concurrency {o.concurrency}"
    return f"{o.output_tok_s:,.0f} tok/s at concurrency {o.concurrency} (TPOT {o.tpot_s * 1e3:.3g} ms per user)"


def _per_user_reading(scenario: Scenario, goal: Target, forbid: tuple[str, ...], calibration: Calibration | None,
                      spec: SpecConfig | None, model: StepModel | None, measured: FigureFit | None,
                      kernels: KernelEvidence | None = None, applied: tuple[str, ...] = ()) -> str:
    """An aggregate rate read as one user's rate: a TPOT of 1/rate at concurrency 1, planned as such (its own
    tracks, combination and floor) — the second verdict of an ambiguous target ("1000 tok/s" said of one stream)."""
    per_user = Target("tpot", MS_PER_S / goal.value, goal.text, per_user_rate=goal.value)
    single = plan(scenario, "tpot", 1, per_user, forbid, calibration, spec, model=model, measured=measured,
                  kernels=kernels, applied=applied)
    assert single.target is not None  # a target was given
    floor_s = single.ceiling.outcome.tpot_s
    return (f"per user, {goal.text} is a TPOT of {per_user.value:.3g} ms at concurrency 1: {single.target.text} "
            f"(ceiling {1.0 / floor_s:.0f} tok/s per user)")
