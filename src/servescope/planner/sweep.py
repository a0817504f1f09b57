"""Decision sweeps with the closed form (the fast path): concurrency × parallel layouts of the same GPUs, and the
Pareto front of output tok/s per GPU against tok/s per user.

Layouts of n GPUs (pp = 1): every tp · dp = n with tp ≥ 1, and for MoE models ep ∈ {1, tp·dp} (experts on every
GPU split by TP, or one expert slice per GPU). Layouts the model rejects (heads not divisible, weights that do
not fit, a group beyond one NVLink domain) are skipped with their reason. Per point:
  tok/s per GPU  = output_tok_s / n      tok/s per user = 1 / TPOT
A point is on the front when no other point is at least as good on both and better on one.
What it does not: simulate the scheduler per point (perfmodel.simulate.simulate does, one point at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from servescope.errors import ScenarioError, ServescopeError


@dataclass(frozen=True)
class Layout:
    tp: int
    ep: int
    dp: int

    def label(self) -> str:
        return f"TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else "") + (f" DP{self.dp}" if self.dp > 1 else "")


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


# GPUs one sweep may lay out: past a rack-scale domain (GB300 NVL72: 72) with room to spare; more is a typo, and
# every divisor of the count becomes a layout to price.
MAX_SWEEP_GPUS = 4096


def layouts(n_gpus: int, moe: bool) -> list[Layout]:
    """TP × DP (and, for MoE, TP × DP with EP over all GPUs) for every divisor TP of n_gpus."""
    if not 1 <= n_gpus <= MAX_SWEEP_GPUS:
        raise ScenarioError(f"cannot lay out {n_gpus} GPUs: a sweep takes 1 to {MAX_SWEEP_GPUS}")
    out = []
    for tp in range(1, n_gpus + 1):
        if n_gpus % tp:
            continue
        dp = n_gpus // tp
        out.append(Layout(tp, 1, dp))
        if moe and n_gpus > 1:
            out.append(Layout(tp, n_gpus, dp))
    return out


def pareto(points: Sequence[SweepPoint]) -> list[bool]:
    """Whether each point is on the front of (tok/s per GPU, tok/s per user), both maximised."""
    flags = []
    for p in points:
        dominated = any(q.tok_s_per_gpu >= p.tok_s_per_gpu and q.tok_s_per_user >= p.tok_s_per_user
                        and (q.tok_s_per_gpu > p.tok_s_per_gpu or q.tok_s_per_user > p.tok_s_per_user)
                        for q in points)
        flags.append(not dominated)
    return flags


def sweep(build: Any, n_gpus: int, concurrency: Sequence[int], moe: bool) -> Sweep:
    """`build(tp=, ep=, dp=)` -> Scenario for each layout of n_gpus; the closed form at each concurrency."""
    from servescope.perfmodel.serving import predict

    pts: list[SweepPoint] = []
    skipped: list[str] = []
    for lay in layouts(n_gpus, moe):
        try:
            sc = build(tp=lay.tp, ep=lay.ep, dp=lay.dp)
            served = predict(sc, list(concurrency))
        except ServescopeError as e:
            skipped.append(f"{lay.label()}: {e}")
            continue
        for sp in served:
            pts.append(SweepPoint(lay, sp.concurrency, sp.output_tok_s / n_gpus, 1.0 / sp.tpot_s, sp.tpot_s,
                                  sp.ttft_s, sp.output_tok_s))
    flags = pareto(pts)
    front = tuple(replace(p, on_front=f) for p, f in zip(pts, flags, strict=True))
    return Sweep(n_gpus, front, tuple(skipped))
