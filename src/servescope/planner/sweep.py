"""Decision sweeps with the closed form (the fast path): concurrency × parallel layouts of the same GPUs, and the
Pareto front of output tok/s per GPU against tok/s per user.

Layouts of n GPUs: planner.layouts (every tp · dp = n; for MoE models also with EP over all GPUs), each a `Change` of the
base scenario (`layout_change`). Layouts the model rejects (heads not divisible, weights that do
not fit, a group beyond one NVLink domain) are skipped with their reason. Per point:
  tok/s per GPU  = output_tok_s / n      tok/s per user = 1 / TPOT
A point is on the front when no other point is at least as good on both and better on one.
What it does not: simulate the scheduler per point (simulate.simulate does, one point at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from servescope.errors import ServescopeError
from servescope.planner.layouts import Layout, layouts
from servescope.planner.whatif import Change

if TYPE_CHECKING:
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.perfmodel.scenario import Scenario


@dataclass(frozen=True)
class SweepPoint:
    layout: Layout
    concurrency: int
    tok_s_per_gpu: float
    tok_s_per_user: float
    tpot_s: float
    ttft_s: float
    output_tok_s: float
    on_front: bool = False


@dataclass(frozen=True)
class Sweep:
    n_gpus: int
    points: tuple[SweepPoint, ...]
    skipped: tuple[str, ...]  # "TP8 EP8: <reason>"


def pareto(points: Sequence[SweepPoint]) -> list[bool]:
    """Whether each point is on the front of (tok/s per GPU, tok/s per user), both maximised."""
    flags = []
    for p in points:
        dominated = any(q.tok_s_per_gpu >= p.tok_s_per_gpu and q.tok_s_per_user >= p.tok_s_per_user
                        and (q.tok_s_per_gpu > p.tok_s_per_gpu or q.tok_s_per_user > p.tok_s_per_user)
                        for q in points)
        flags.append(not dominated)
    return flags


def layout_change(lay: Layout) -> Change:
    """A layout of the base scenario's GPUs as a scenario change (one stage: pp = 1)."""
    return Change.of({"tp": lay.tp, "ep": lay.ep, "dp": lay.dp, "pp": 1})


def layout_scenario(base: Scenario, lay: Layout) -> Scenario:
    """The base scenario on one layout, checked as `Scenario.build` checks it, in its order: the layout
    (Deployment.with_), the collective groups within one NVLink domain (step.model_for), the memory (check_fits)."""
    from servescope.perfmodel.memory import check_fits
    from servescope.perfmodel.step import model_for

    sc = layout_change(lay).apply(base)
    model_for(sc)
    check_fits(sc)
    return sc


def sweep(base: Scenario, n_gpus: int, concurrency: Sequence[int], moe: bool,
          fit: FigureFit | None = None) -> Sweep:
    """The closed form at each concurrency on each layout of n_gpus (`layout_change` applied to `base`). With a
    calibrated `fit` (a deployment calibrated on measured figures), each layout's points are restated on it
    (calibrate.measured.restate_points, its levels carried to every layout)."""
    from servescope.calibrate.measured import restate_points
    from servescope.perfmodel.serving import predict

    pts: list[SweepPoint] = []
    skipped: list[str] = []
    for lay in layouts(n_gpus, moe):
        try:
            sc = layout_scenario(base, lay)
            served = predict(sc, list(concurrency))
            if fit is not None:
                served = list(restate_points(sc, served, fit))
        except ServescopeError as e:
            skipped.append(f"{lay.label()}: {e}")
            continue
        for sp in served:
            pts.append(SweepPoint(lay, sp.concurrency, sp.output_tok_s / n_gpus, 1.0 / sp.tpot_s, sp.tpot_s,
                                  sp.ttft_s, sp.output_tok_s))
    flags = pareto(pts)
    front = tuple(replace(p, on_front=f) for p, f in zip(pts, flags, strict=True))
    return Sweep(n_gpus, front, tuple(skipped))
