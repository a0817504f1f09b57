"""A grid sweep in two tiers (issue 30.4; aiconfigurator's screen-then-simulate, Vidur's search on Ray): the screen
over the whole grid (planner.screen), its error measured, then the full closed form on the points the screen cannot
rule out, then `simulate` on the best of those. Points compare within their workload (an ISL, OSL pair).

  error     = max over up to `sample` held-out points (seeded, off the anchors) of |screen / full closed form − 1|,
              per quantity (TPOT, TTFT, output tok/s) and per class of point: within its KV slots (the batch is an
              anchor) or past them (the batch, the slots, lies between anchors)
  margin    m = min(MARGIN_CAP, max(MARGIN_FLOOR, MARGIN_SAFETY · error)), per class and quantity
  bounds    the full closed form x of a screened x̂ lies in [x̂/(1 + m), x̂/(1 − m)]
  may meet  the SLA at the optimistic bounds (TTFT, TPOT at x̂/(1 + m));  surely meets: at the pessimistic ones
  near      may meet, and no surely-meeting point of the workload has a pessimistic tok/s per GPU above the point's
            optimistic one (the candidates for the workload's optimum); with `front`, ... above it on both tok/s
            per GPU and tok/s per user (the candidates for its Pareto front)
  exact     the full closed form (perfmodel.serving.predict_arrays) at every near point; the SLA, each workload's
            optimum (most tok/s per GPU within the SLA) and the front of the near points on those values
  simulated the workloads' optima first, by tok/s per GPU, then the rest of the front, `simulate_max` in all
            (simulate.simulate: a closed loop of simulate.points_prompts requests, seed 0), through the caller's
            `spread` (the CLI's --ray: Ray tasks, analysis.ray_tasks) — the same runs, in the same order, either way
What it does not: hold the grid's exact values (only the near points'), or simulate a point off the front.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from servescope.errors import ServescopeError
from servescope.planner.screen import DEFAULT_MAX_GRID_MIB, QUANTITIES, Grid, Screened, screen_grid
from servescope.planner.sweep import Simulated, Sla
from servescope.units import MIB

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner.layouts import Layout
    from servescope.simulate.metrics import SimResult

# The margin is the largest sampled relative error times MARGIN_SAFETY (assumption: a 2,000-point sample's maximum
# under-reads the whole grid's, so it is doubled), and at least MARGIN_FLOOR (float rounding at the anchors).
MARGIN_SAFETY = 2.0
MARGIN_FLOOR = 1e-3
MARGIN_CAP = 0.5  # the bounds need m < 1; a screen this far off is reported, not trusted further
ERROR_SAMPLE = 2000
SIMULATE_MAX = 8


def exact_points(sc: Scenario, isl: int, osl: int, concurrency: Sequence[int]) -> dict[str, np.ndarray]:
    """The full closed form (perfmodel.serving.predict_arrays) at one (ISL, OSL) and some concurrencies."""
    from servescope.perfmodel.serving import predict_arrays

    a = predict_arrays(sc.with_(isl=int(isl), osl=int(osl)), list(concurrency))
    return {k: np.asarray(a[k], dtype=float) for k in QUANTITIES}


def exact_at(s: Screened, idx: np.ndarray) -> dict[str, np.ndarray]:
    """The full closed form at the points `idx` (grouped by configuration, ISL and OSL: one call per group)."""
    out = {q: np.empty(len(idx)) for q in QUANTITIES}
    groups: dict[tuple[int, int, int], list[int]] = {}
    concs: dict[tuple[int, int, int], list[int]] = {}
    for j, i in enumerate(idx):
        _, isl, osl, c = s.where(int(i))
        key = (int(i) // s.grid.per_config, isl, osl)
        groups.setdefault(key, []).append(j)
        concs.setdefault(key, []).append(c)
    for (k, isl, osl), js in groups.items():
        e = exact_points(s.configs[k].scenario, isl, osl, concs[(k, isl, osl)])
        for q in QUANTITIES:
            out[q][js] = e[q]
    return out


CLASSES = ("within_slots", "past_slots")  # the concurrency fits the KV slots (batch exact) or not (interpolated)


@dataclass(frozen=True)
class ScreenError:
    """The screen against the full closed form on held-out points, per class of point (CLASSES: the batch is an
    anchor, or the KV slots, between anchors): points sampled, largest and 99th-percentile relative error per
    quantity; the margins (module docstring)."""

    sample: dict[str, int]
    max_rel: dict[str, dict[str, float]]
    p99_rel: dict[str, dict[str, float]]

    @property
    def margin(self) -> dict[str, dict[str, float]]:
        return {c: {q: min(MARGIN_CAP, max(MARGIN_FLOOR, MARGIN_SAFETY * v)) for q, v in m.items()}
                for c, m in self.max_rel.items()}

    def at(self, capped: np.ndarray) -> dict[str, np.ndarray]:
        """Each point's margin per quantity, by its class."""
        m = self.margin
        return {q: np.where(capped, m["past_slots"][q], m["within_slots"][q]) for q in QUANTITIES}


def screen_error(s: Screened, sample: int = ERROR_SAMPLE, seed: int = 0) -> ScreenError:
    """`ScreenError` on up to `sample` points per class drawn (seeded) from those off the anchors (a class without
    such points is exact where it has any: its error is 0)."""
    rng = np.random.default_rng(seed)
    n, mx, p99 = {}, {}, {}
    for name, members in zip(CLASSES, (~s.capped, s.capped), strict=True):
        held = np.flatnonzero(members & ~s.on_anchor)
        idx = np.sort(rng.choice(held, size=min(sample, held.size), replace=False))
        exact = exact_at(s, idx)
        rel = {q: np.abs(s.values[q][idx] / exact[q] - 1.0) for q in QUANTITIES}
        n[name] = int(idx.size)
        mx[name] = {q: float(r.max()) if r.size else 0.0 for q, r in rel.items()}
        p99[name] = {q: float(np.percentile(r, 99)) if r.size else 0.0 for q, r in rel.items()}
    return ScreenError(n, mx, p99)


def _meets(tpot: np.ndarray, ttft: np.ndarray, sla: Sla | None) -> np.ndarray:
    ok = np.ones(tpot.shape, dtype=bool)
    if sla is not None and sla.tpot_max_s is not None:
        ok &= tpot <= sla.tpot_max_s
    if sla is not None and sla.ttft_max_s is not None:
        ok &= ttft <= sla.ttft_max_s
    return ok


def workloads(s: Screened, idx: np.ndarray | None = None) -> np.ndarray:
    """Each point's workload (ISL, OSL pair) as one integer: fronts and optima compare points of one workload."""
    i = np.arange(s.values["tpot_s"].size) if idx is None else np.asarray(idx)
    return (i % s.grid.per_config) // len(s.grid.concurrency)


def near_set(values: dict[str, np.ndarray], group: np.ndarray, n_gpus: int, sla: Sla | None,
             margin: dict[str, np.ndarray] | dict[str, float], front: bool = False) -> np.ndarray:
    """Whether each screened point is near (module docstring): it may meet the SLA and no point of its `group` that
    surely meets it is surely better — on tok/s per GPU (`front` False: the candidates for the workload's optimum),
    or on both tok/s per GPU and tok/s per user (`front`: the candidates for its Pareto front). Margins per
    quantity: scalars or one per point."""
    tpot, ttft, tok = values["tpot_s"], values["ttft_s"], values["output_tok_s"] / n_gpus
    mt, mf, mo = (np.broadcast_to(np.asarray(margin[q], dtype=float), tpot.shape) for q in QUANTITIES)
    may = _meets(tpot / (1 + mt), ttft / (1 + mf), sla)
    sure = _meets(tpot / (1 - mt), ttft / (1 - mf), sla)
    if not sure.any():
        return may
    q_gpu, p_gpu = tok[sure] / (1 + mo[sure]), tok / (1 - mo)
    if not front:
        best = np.full(int(group.max()) + 1, -np.inf)
        np.maximum.at(best, group[sure], q_gpu)
        return np.asarray(may & ~(best[group] > p_gpu))
    return np.asarray(may & ~_front_dominated(group.astype(float), sure, q_gpu, (1 - mt[sure]) / tpot[sure], p_gpu,
                                              (1 + mt) / tpot))


def _front_dominated(g: np.ndarray, sure: np.ndarray, q_gpu: np.ndarray, q_user: np.ndarray, p_gpu: np.ndarray,
                     p_user: np.ndarray) -> np.ndarray:
    """Whether a surely-meeting point of the same group beats each point on both: the surely-meeting points sorted
    by group, then pessimistic tok/s per GPU descending, with a running maximum of their pessimistic tok/s per user
    that restarts at each group (an offset of one user range per group)."""
    q_g = g[sure]
    span_gpu = 2.0 * float(max(q_gpu.max(), p_gpu.max())) + 1.0
    span_user = 2.0 * float(max(q_user.max(), p_user.max())) + 1.0
    key = q_g * span_gpu - q_gpu  # ascending: group, then tok/s per GPU descending
    order = np.argsort(key, kind="stable")
    key, best = key[order], np.maximum.accumulate(q_user[order] + q_g[order] * span_user)
    above = np.searchsorted(key, g * span_gpu - p_gpu, side="left")  # ... with a strictly higher tok/s per GPU
    first = np.searchsorted(key, g * span_gpu - span_gpu / 2.0, side="left")  # the group's first
    return np.asarray((above > first) & (best[np.maximum(above - 1, 0)] - g * span_user > p_user))


def front_flags(gpu: np.ndarray, user: np.ndarray) -> np.ndarray:
    """Whether each point is on the Pareto front of (gpu, user), both maximised: no other point at least as good on
    both and better on one (ties on both are all kept)."""
    order = np.lexsort((-user, -gpu))
    flags = np.zeros(gpu.shape, dtype=bool)
    best_above = -np.inf  # the best user of the points with a strictly higher gpu
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and gpu[order[j]] == gpu[order[i]]:
            j += 1
        group = order[i:j]
        top = user[group[0]]  # the group is sorted by user, best first
        flags[group] = (user[group] == top) & (top > best_above)
        best_above = max(best_above, top)
        i = j
    return flags


def grouped_front(gpu: np.ndarray, user: np.ndarray, group: np.ndarray) -> np.ndarray:
    """`front_flags` within each group."""
    flags = np.zeros(gpu.shape, dtype=bool)
    for g in np.unique(group):
        m = group == g
        flags[m] = front_flags(gpu[m], user[m])
    return flags


@dataclass(frozen=True)
class GridPoint:
    """One point of the exact tier: the full closed form's values, and the screen's for comparison."""

    layout: Layout
    quant: str
    isl: int
    osl: int
    concurrency: int
    tpot_s: float
    ttft_s: float
    output_tok_s: float
    screened_tpot_s: float
    screened_ttft_s: float
    screened_output_tok_s: float
    sla_met: bool
    on_front: bool  # on the Pareto front of the workload's near points within the SLA (its whole front with `front`)
    best: bool  # the workload's most tok/s per GPU within the SLA: its optimum
    simulated: Simulated | None = None


@dataclass(frozen=True)
class GridSweep:
    grid: Grid
    sla: Sla | None
    screened: int  # points the screen priced (the configurations the model accepts)
    skipped: tuple[str, ...]  # "<configuration>: <reason>"
    error: ScreenError
    points: tuple[GridPoint, ...]  # the near points, with the full closed form
    simulated: int
    notes: tuple[str, ...] = field(default=())
    front: bool = False  # the near set held the front's candidates, not only the optimum's


Runner = Callable[["Scenario", int], "SimResult"]
# Runs fn(key, 0) for each key, results in key order, somewhere else (the CLI's: Ray tasks, analysis.ray_tasks)
Spread = Callable[[Callable[[str, int], "Simulated | str"], list[str]], list["Simulated | str"]]


def grid_sweep(base: Scenario, grid: Grid, sla: Sla | None = None, max_bytes: float = DEFAULT_MAX_GRID_MIB * MIB,
               sample: int = ERROR_SAMPLE, simulate_max: int = SIMULATE_MAX, front: bool = False,
               spread: Spread | None = None, run: Runner | None = None) -> GridSweep:
    """The two tiers of the module docstring on `grid` around `base` (`front`: the near set holds the candidates
    for each workload's Pareto front, not only for its optimum); `run(scenario, concurrency)` replaces the
    closed-loop simulation (tests), `spread(fn, keys)` runs the simulations elsewhere (the CLI's --ray: Ray tasks)."""
    s = screen_grid(base, grid, max_bytes)
    err = screen_error(s, sample)
    idx = np.flatnonzero(near_set(s.values, workloads(s), grid.n_gpus, sla, err.at(s.capped), front))
    exact = exact_at(s, idx)
    ok = _meets(exact["tpot_s"], exact["ttft_s"], sla)
    gpu, user, wl = exact["output_tok_s"] / grid.n_gpus, 1.0 / exact["tpot_s"], workloads(s, idx)
    on_front, best = np.zeros(idx.shape, dtype=bool), np.zeros(idx.shape, dtype=bool)
    on_front[ok] = grouped_front(gpu[ok], user[ok], wl[ok])
    for w in np.unique(wl[ok]):
        j = np.flatnonzero(ok & (wl == w))
        best[j[np.argmax(gpu[j])]] = True  # the first of equals, in grid order
    pts = [_point(s, int(i), {q: float(exact[q][j]) for q in QUANTITIES}, bool(ok[j]), bool(on_front[j]),
                  bool(best[j])) for j, i in enumerate(idx)]
    chosen = _to_simulate(on_front, gpu, wl)[:simulate_max]
    sims, notes = _simulate(s, [int(idx[j]) for j in chosen], sla, spread, run)
    for k, sim in zip(chosen, sims, strict=True):
        if sim is not None:
            pts[k] = _with_sim(pts[k], sim)
    return GridSweep(grid, sla, int(s.values["tpot_s"].size), s.skipped, err, tuple(pts),
                     sum(x is not None for x in sims), tuple(notes), front)


def _to_simulate(front: np.ndarray, gpu: np.ndarray, wl: np.ndarray) -> list[int]:
    """The front's points in simulation order: each workload's best tok/s per GPU first (by that figure), then
    each one's second best, and so on."""
    ranked = sorted((int(j) for j in np.flatnonzero(front)), key=lambda j: (-gpu[j], j))
    count: dict[int, int] = {}
    rank: dict[int, int] = {}
    for j in ranked:
        w = int(wl[j])
        rank[j] = count.get(w, 0)
        count[w] = rank[j] + 1
    return sorted(ranked, key=lambda j: (rank[j], -gpu[j], j))


def _point(s: Screened, i: int, exact: dict[str, float], ok: bool, front: bool, best: bool) -> GridPoint:
    cfg, isl, osl, c = s.where(i)
    return GridPoint(cfg.layout, cfg.quant, isl, osl, c, exact["tpot_s"], exact["ttft_s"], exact["output_tok_s"],
                     float(s.values["tpot_s"][i]), float(s.values["ttft_s"][i]), float(s.values["output_tok_s"][i]),
                     ok, front, best)


def _with_sim(p: GridPoint, sim: Simulated) -> GridPoint:
    from dataclasses import replace

    return replace(p, simulated=sim)


def _simulate(s: Screened, idx: list[int], sla: Sla | None, spread: Spread | None,
              run: Runner | None) -> tuple[list[Simulated | None], list[str]]:
    """The simulation of each point (closed loop), in order; a refused point is a note, not a failure."""
    jobs = []
    for i in idx:
        cfg, isl, osl, c = s.where(i)
        jobs.append((cfg.scenario.with_(isl=isl, osl=osl), c, f"{cfg.label()} isl{isl} osl{osl} c{c}"))
    task = _SimTask(jobs, sla, run)

    def one(key: str, top_n: int) -> Simulated | str:  # a plain function: what Ray can make a remote of
        return task(key, top_n)

    keys = [str(k) for k in range(len(jobs))]
    outs = spread(one, keys) if spread is not None else [one(k, 0) for k in keys]
    return [o if isinstance(o, Simulated) else None for o in outs], [o for o in outs if isinstance(o, str)]


@dataclass(frozen=True)
class _SimTask:
    """One point's simulation by its index (a Ray task or a plain call): Simulated, or a note when refused."""

    jobs: list[tuple[Scenario, int, str]]
    sla: Sla | None
    run: Runner | None

    def __call__(self, key: str, _top_n: int) -> Simulated | str:
        sc, c, label = self.jobs[int(key)]
        try:
            res = self.run(sc, c) if self.run is not None else _closed(sc, c)
        except ServescopeError as e:
            return f"{label}: not simulated: {e}"
        met = (self.sla or Sla()).met(res.ttft.mean_s, res.tpot.mean_s)
        return Simulated(res.requests, res.ttft.mean_s, res.ttft.p99_s, res.tpot.mean_s, res.tpot.p99_s,
                         res.output_tok_s, met)


def _closed(sc: Scenario, c: int) -> SimResult:
    from servescope.simulate import points_prompts, simulate

    return simulate(sc, "closed", c, points_prompts(c))
