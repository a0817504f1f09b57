"""Decision sweeps with the closed form (the fast path): concurrency × parallel layouts of the same GPUs, and the
Pareto front of output tok/s per GPU against tok/s per user.

Layouts of n GPUs: planner.layouts (every tp · dp = n; for MoE models also with EP over all GPUs). Layouts the model rejects (heads not divisible, weights that do
not fit, a group beyond one NVLink domain) are skipped with their reason. Per point:
  tok/s per GPU  = output_tok_s / n      tok/s per user = 1 / TPOT
A point is on the front when no other point is at least as good on both and better on one.
What it does not: simulate the scheduler per point (simulate.simulate does, one point at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servescope.errors import ServescopeError
from servescope.planner.layouts import Layout, layouts


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


def sweep(build: Any, n_gpus: int, concurrency: Sequence[int], moe: bool, restate: Any = None) -> Sweep:
    """`build(tp=, ep=, dp=)` -> Scenario for each layout of n_gpus; the closed form at each concurrency.
    `restate(scenario, points)` -> points, when given: each layout's points restated (a deployment calibrated on
    measured figures: calibrate.measured.restate_points, its levels carried to every layout)."""
    from servescope.perfmodel.serving import predict

    pts: list[SweepPoint] = []
    skipped: list[str] = []
    for lay in layouts(n_gpus, moe):
        try:
            sc = build(tp=lay.tp, ep=lay.ep, dp=lay.dp)
            served = predict(sc, list(concurrency))
            if restate is not None:
                served = list(restate(sc, served))
        except ServescopeError as e:
            skipped.append(f"{lay.label()}: {e}")
            continue
        for sp in served:
            pts.append(SweepPoint(lay, sp.concurrency, sp.output_tok_s / n_gpus, 1.0 / sp.tpot_s, sp.tpot_s,
                                  sp.ttft_s, sp.output_tok_s))
    flags = pareto(pts)
    front = tuple(replace(p, on_front=f) for p, f in zip(pts, flags, strict=True))
    return Sweep(n_gpus, front, tuple(skipped))
