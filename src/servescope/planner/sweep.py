"""Decision sweeps with the closed form (the fast path): concurrency × parallel layouts of the same GPUs, and the
Pareto front of output tok/s per GPU against tok/s per user.

Layouts of n GPUs: planner.layouts (every tp · dp = n; for MoE models also with EP over all GPUs), each a `Change` of the
base scenario (`layout_change`). Layouts the model rejects (heads not divisible, weights that do
not fit, a group beyond one NVLink domain) are skipped with their reason. Per point:
  tok/s per GPU  = output_tok_s / n      tok/s per user = 1 / TPOT
A point is on the front when no other point is at least as good on both and better on one.
Two tiers (issue 30.4; aiconfigurator's --ttft/--tpot SLA filter): with an SLA (`Sla`: TTFT ≤ ttft_max_s and
TPOT ≤ tpot_max_s, either optional) every closed-form point is screened against it (the closed form's mean TTFT
and TPOT), and only the passing points on the Pareto front of the passing set are simulated
(`simulate_front`: simulate.simulate, a closed loop of simulate.points_prompts requests at the point's
concurrency), each then checked against the SLA on its simulated mean TTFT and TPOT.
What it does not: simulate every grid point, or price a point the closed form rejects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from servescope.errors import ServescopeError
from servescope.planner.layouts import Layout, layouts
from servescope.planner.whatif import Change

if TYPE_CHECKING:
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.perfmodel.scenario import Scenario
    from servescope.simulate.metrics import SimResult


@dataclass(frozen=True)
class Sla:
    """Service-level bounds on a point's mean TTFT and TPOT, seconds (None: no bound)."""

    ttft_max_s: float | None = None
    tpot_max_s: float | None = None

    def met(self, ttft_s: float, tpot_s: float) -> bool:
        return ((self.ttft_max_s is None or ttft_s <= self.ttft_max_s)
                and (self.tpot_max_s is None or tpot_s <= self.tpot_max_s))


@dataclass(frozen=True)
class Simulated:
    """A point's simulated closed loop (simulate.simulate): means and p99 in seconds, output tok/s, the SLA on the
    simulated means."""

    requests: int
    ttft_mean_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_p99_s: float
    output_tok_s: float
    sla_met: bool


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
    sla_met: bool | None = None  # the closed form's TTFT and TPOT within the SLA (None: no SLA)
    simulated: Simulated | None = None


@dataclass(frozen=True)
class Sweep:
    n_gpus: int
    points: tuple[SweepPoint, ...]
    skipped: tuple[str, ...]  # "TP8 EP8: <reason>"
    sla: Sla | None = None
    screened: int = 0  # points checked against the SLA (the whole grid)
    passed: int = 0  # ... within it on the closed form
    simulated: int = 0  # ... then simulated (the front of the passing points)
    notes: tuple[str, ...] = field(default=())


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


def screen(sw: Sweep, sla: Sla) -> Sweep:
    """Every point checked against `sla` on the closed form's mean TTFT and TPOT."""
    pts = tuple(replace(p, sla_met=sla.met(p.ttft_s, p.tpot_s)) for p in sw.points)
    return replace(sw, points=pts, sla=sla, screened=len(pts), passed=sum(bool(p.sla_met) for p in pts))


def to_simulate(sw: Sweep) -> list[int]:
    """Indices of the points to simulate: those within the SLA on the Pareto front of the points within it."""
    idx = [i for i, p in enumerate(sw.points) if p.sla_met]
    flags = pareto([sw.points[i] for i in idx])
    return [i for i, f in zip(idx, flags, strict=True) if f]


def simulate_front(base: Scenario, sw: Sweep,
                   run: Callable[[Scenario, int], SimResult] | None = None) -> Sweep:
    """The screened sweep with its passing front simulated (`to_simulate`); `run(scenario, concurrency)` defaults
    to simulate.simulate's closed loop of points_prompts(concurrency) requests. A point the simulation refuses
    (a ServescopeError: memory or time budget) is noted, not simulated."""
    assert sw.sla is not None, "screen the sweep first"
    from servescope.simulate import points_prompts, simulate

    def closed(sc: Scenario, c: int) -> SimResult:
        return simulate(sc, "closed", c, points_prompts(c))

    go = run or closed
    pts, notes, n = list(sw.points), list(sw.notes), 0
    for i in to_simulate(sw):
        p = pts[i]
        try:
            res = go(layout_scenario(base, p.layout), p.concurrency)
        except ServescopeError as e:
            notes.append(f"{p.layout.label()} c{p.concurrency}: not simulated: {e}")
            continue
        sim = Simulated(res.requests, res.ttft.mean_s, res.ttft.p99_s, res.tpot.mean_s, res.tpot.p99_s,
                        res.output_tok_s, sw.sla.met(res.ttft.mean_s, res.tpot.mean_s))
        pts[i], n = replace(p, simulated=sim), n + 1
    return replace(sw, points=tuple(pts), simulated=n, notes=tuple(notes))
