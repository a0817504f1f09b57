"""Latency–throughput curves of a plan: the baseline, each track that pays, and the combination, over a grid of
concurrencies, priced with the same evaluator (and calibration) as the plan.

Does: for each curve, per concurrency c: TPOT (s) and output tokens/s of the instance (Evaluator.at: batch
capped at the KV-memory limit, prefill interference, speculative iterations), from which a picture plots
tok/s per user = 1 / TPOT against tok/s per GPU = output tok/s / GPUs of the instance (tp · pp · dp).
Output tok/s is batch / TPOT, the decode throughput the planner's throughput objective counts (perfmodel.predict's
output_tok_s also charges each request's TTFT and is 1–3% lower); TPOT is predict's (tests/planner/test_report_curves.py).
Concurrencies past a curve's memory limit repeat its last point and are dropped.
Does not: rank or combine (planner.plan does), or draw (servescope.report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servescope.perfmodel.scenario import Scenario
from servescope.planner.plan import Plan
from servescope.planner.tracks import TRACK_KINDS
from servescope.planner.whatif import Evaluator, PerfModel, StepModel, WhatIf

DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class CurvePoint:
    concurrency: int
    batch: int  # sequences in the decode step (min(concurrency, memory limit))
    tpot_s: float
    output_tok_s: float  # whole instance
    tok_s_per_user: float  # 1 / tpot_s
    tok_s_per_gpu: float  # output_tok_s / gpus


@dataclass(frozen=True)
class Curve:
    name: str  # "baseline", a track kind, or "combined"
    tracks: tuple[str, ...]
    points: tuple[CurvePoint, ...]


def _gpus(sc: Scenario) -> int:
    return max(1, sc.n_gpus)


def _curve(ev: Evaluator, name: str, whatifs: tuple[WhatIf, ...], concurrencies: Sequence[int]) -> Curve:
    gpus = _gpus(ev.scenario_of(whatifs))
    points: list[CurvePoint] = []
    for c in concurrencies:
        o = ev.at(whatifs, int(c))
        if points and o.concurrency == points[-1].batch:
            break  # past the memory limit: the batch no longer grows
        points.append(CurvePoint(int(c), o.concurrency, o.tpot_s, o.output_tok_s, 1.0 / o.tpot_s,
                                 o.output_tok_s / gpus))
    return Curve(name, tuple(w.kind for w in whatifs), tuple(points))


def plan_curves(p: Plan, concurrencies: Sequence[int] = DEFAULT_CONCURRENCIES,
                model: StepModel | None = None) -> tuple[Curve, ...]:
    """Baseline, every track that pays (alone), and the plan's combination when it has two or more tracks: each
    with the what-if its track was evaluated with in the plan (the planner's tracks are not run again), priced
    with the plan's step model (on a deployment calibrated on figures, at its levels: the baseline curve passes
    through the measured points)."""
    if p.measured is not None:  # the curves pass through the measured points: their concurrencies are on the grid
        concurrencies = sorted({*concurrencies, *(m.concurrency for m in p.measured.points)})
    ev = Evaluator(model or p.step_model or PerfModel(), p.scenario, p.objective, p.concurrency, p.tpot_limit_s,
                   (), p.applied_whatifs)
    whatifs: dict[str, WhatIf] = {t.kind: t.whatif for t in p.tracks if t.pays and t.whatif is not None}
    curves = [_curve(ev, "baseline", (), concurrencies)]
    curves += [_curve(ev, k, (w,), concurrencies) for k, w in whatifs.items()]
    chosen = [k for k in p.combined.tracks if k in whatifs]
    if len(chosen) > 1:
        ordered = tuple(whatifs[k] for k in sorted(chosen, key=TRACK_KINDS.index))
        curves.append(_curve(ev, "combined", ordered, concurrencies))
    return tuple(curves)
