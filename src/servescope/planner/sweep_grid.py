"""A grid sweep in two tiers (issue 30.4; aiconfigurator's screen-then-simulate, Vidur's search on Ray): the screen
over the whole grid (planner.screen), its error measured, then the full closed form on the points the screen cannot
rule out, then `simulate` on the best of those. Points compare within their workload (an ISL, OSL pair).

  error     = max over up to `sample` held-out points (seeded, off the anchors) of |screen / full closed form − 1|,
              per quantity (TPOT, TTFT, output tok/s) and per class of point: within its KV slots (the batch is an
              anchor) or past them (the batch, the slots, lies between anchors), each for the points without and
              with a speculative setting (`classes`; the latter's closed form: planner.sweep_spec)
  margin    m = min(MARGIN_CAP, max(MARGIN_FLOOR, MARGIN_SAFETY · error)), per class and quantity
  bounds    the full closed form x of a screened x̂ lies in [x̂/(1 + m), x̂/(1 − m)]
  may meet  the SLA at the optimistic bounds (TTFT, TPOT at x̂/(1 + m));  surely meets: at the pessimistic ones
  near      may meet, and no surely-meeting point of the workload has a pessimistic tok/s per GPU above the point's
            optimistic one (the candidates for the workload's optimum); with `front`, ... above it on both tok/s
            per GPU and tok/s per user (the candidates for its Pareto front)
  exact     the full closed form (perfmodel.serving.predict_arrays) at every near point; the SLA, each workload's
            optimum (most tok/s per GPU within the SLA) and the front of the near points on those values
  simulated the workloads' optima first, by tok/s per GPU, then the rest of the front, then the other near points
            by tok/s per GPU, `simulate_max` in all (None: every one), speculative points left out (a note);
            planner.sweep_sims: a closed loop of sim_requests(c) requests, seed 0, equal runs once, here, in worker
            processes or through the caller's `spread` (the CLI's --ray: Ray tasks, analysis.ray_tasks) — the same
            runs, in the same order, either way
What it does not: hold the grid's exact values (only the near points'), or simulate a point the screen ruled out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from servescope.planner.screen import DEFAULT_MAX_GRID_MIB, QUANTITIES, Grid, Screened, screen_grid
from servescope.planner.sweep import Simulated, Sla
from servescope.planner.sweep_sims import Runner, Spread
from servescope.planner.sweep_spec import SpecPricing, exact_spec
from servescope.units import MIB

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner.layouts import Layout

# The margin is the largest sampled relative error times MARGIN_SAFETY (assumption: a 2,000-point sample's maximum
# under-reads the whole grid's, so it is doubled), and at least MARGIN_FLOOR (float rounding at the anchors).
MARGIN_SAFETY = 2.0
MARGIN_FLOOR = 1e-3
MARGIN_CAP = 0.5  # the bounds need m < 1; a screen this far off is reported, not trusted further
ERROR_SAMPLE = 2000
SIMULATE_MAX = 8


def exact_points(sc: Scenario, isl: int, osl: int, concurrency: Sequence[int],
                 spec: SpecPricing | None = None) -> dict[str, np.ndarray]:
    """The full closed form (perfmodel.serving.predict_arrays; with `spec`, its speculative form,
    planner.sweep_spec.exact_spec) at one (ISL, OSL) and some concurrencies."""
    from servescope.perfmodel.serving import predict_arrays

    if spec is not None:
        return exact_spec(sc.with_(isl=int(isl), osl=int(osl)), spec, list(concurrency))
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
        e = exact_points(s.configs[k].scenario, isl, osl, concs[(k, isl, osl)], s.configs[k].spec)
        for q in QUANTITIES:
            out[q][js] = e[q]
    return out


# the concurrency fits the KV slots (batch exact) or not (interpolated); "spec_": a speculative setting's points
CLASSES = ("within_slots", "past_slots", "spec_within_slots", "spec_past_slots")


def classes(s: Screened) -> dict[str, np.ndarray]:
    """Each class's members (bool per point); a class without points is left out."""
    spec = s.spec
    out = {"within_slots": ~s.capped & ~spec, "past_slots": s.capped & ~spec,
           "spec_within_slots": ~s.capped & spec, "spec_past_slots": s.capped & spec}
    return {k: v for k, v in out.items() if k in ("within_slots", "past_slots") or v.any()}


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

    def at(self, members: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each point's margin per quantity, by its class (`classes`: members per class)."""
        m = self.margin
        out = {q: np.full(next(iter(members.values())).shape, MARGIN_FLOOR) for q in QUANTITIES}
        for name, mem in members.items():
            for q in QUANTITIES:
                out[q][mem] = m[name][q]
        return out


def screen_error(s: Screened, sample: int = ERROR_SAMPLE, seed: int = 0) -> ScreenError:
    """`ScreenError` on up to `sample` points per class drawn (seeded) from those off the anchors (a class without
    such points is exact where it has any: its error is 0)."""
    rng = np.random.default_rng(seed)
    n, mx, p99 = {}, {}, {}
    for name, members in classes(s).items():
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
    spec: str  # the speculative setting: "off" or "METHOD:K"
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
    runs: int = 0  # simulations run (equal ones once: planner.sweep_sims)




def grid_sweep(base: Scenario, grid: Grid, sla: Sla | None = None, max_bytes: float = DEFAULT_MAX_GRID_MIB * MIB,
               sample: int = ERROR_SAMPLE, simulate_max: int | None = SIMULATE_MAX, front: bool = False,
               spread: Spread | None = None, run: Runner | None = None, workers: int = 1) -> GridSweep:
    """The two tiers of the module docstring on `grid` around `base` (`front`: the near set holds the candidates
    for each workload's Pareto front, not only for its optimum); `run(scenario, concurrency)` replaces the
    closed-loop simulation (tests), `spread(fn, keys)` runs the simulations elsewhere (the CLI's --ray: Ray tasks),
    `workers` > 1 in that many processes; `simulate_max` None: every near point that can be simulated."""
    s = screen_grid(base, grid, max_bytes)
    err = screen_error(s, sample)
    idx = np.flatnonzero(near_set(s.values, workloads(s), grid.n_gpus, sla, err.at(classes(s)), front))
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
    plain = ~s.spec[idx]
    order = _to_simulate(on_front & plain, gpu, wl)
    order += sorted((int(j) for j in np.flatnonzero(plain & ~on_front)), key=lambda j: (-gpu[j], j))
    chosen = order if simulate_max is None else order[:simulate_max]
    sims, notes, runs = _simulate(s, [int(idx[j]) for j in chosen], sla, spread, run, workers)
    for k, sim in zip(chosen, sims, strict=True):
        if sim is not None:
            pts[k] = _with_sim(pts[k], sim)
    n_spec = int((~plain).sum())
    if n_spec:
        notes.append(f"{n_spec:,} near points with a speculative setting not simulated (the simulator has no "
                     "speculative decoding)")
    return GridSweep(grid, sla, int(s.values["tpot_s"].size), s.skipped, err, tuple(pts),
                     sum(x is not None for x in sims), tuple(notes), front, runs)


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
    return GridPoint(cfg.layout, cfg.quant, cfg.setting.label(), isl, osl, c, exact["tpot_s"], exact["ttft_s"], exact["output_tok_s"],
                     float(s.values["tpot_s"][i]), float(s.values["ttft_s"][i]), float(s.values["output_tok_s"][i]),
                     ok, front, best)


def _with_sim(p: GridPoint, sim: Simulated) -> GridPoint:
    from dataclasses import replace

    return replace(p, simulated=sim)


def _simulate(s: Screened, idx: list[int], sla: Sla | None, spread: Spread | None, run: Runner | None,
              workers: int) -> tuple[list[Simulated | None], list[str], int]:
    """The simulation of each point (planner.sweep_sims: closed loop of sim_requests(c) requests), in order, each
    distinct one run once; a refused point is a note, not a failure. Also: the runs made."""
    from servescope.planner.sweep_sims import Job, SimTask, dedupe, run_task, sim_requests

    same = _scenario_classes(s)
    jobs = []
    for i in idx:
        cfg, isl, osl, c = s.where(i)
        k = i // s.grid.per_config
        jobs.append((same[k], Job(cfg.scenario.with_(isl=isl, osl=osl), c, sim_requests(c),
                                  f"{cfg.label()} isl{isl} osl{osl} c{c}")))
    distinct, where = dedupe(jobs)
    outs = run_task(SimTask(tuple(distinct), sla, run), spread, workers)
    got = [outs[w] for w in where]
    notes = list(dict.fromkeys(o for o in outs if isinstance(o, str)))
    return [o if isinstance(o, Simulated) else None for o in got], notes, len(distinct)


def _scenario_classes(s: Screened) -> list[int]:
    """Per configuration, the first configuration with an equal scenario (two names of one quantisation)."""
    out: list[int] = []
    for k, cfg in enumerate(s.configs):
        out.append(next((j for j in range(k) if _equal(s.configs[j].scenario, cfg.scenario)), k))
    return out


def _equal(a: Scenario, b: Scenario) -> bool:
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # a field that does not compare to one truth value: taken as different
        return False
