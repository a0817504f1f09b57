"""p50/p90/p99 TTFT, TPOT and ITL for every `servescope model` point, from the fastest honest source.

What it does: for each concurrency c of a model sweep, a short closed-loop simulation (the engine's own scheduler,
sc.isl/sc.osl fixed lengths, seed 0; simulate()) of `point_requests(c)` requests — few enough that the whole sweep
stays well under a second — while the sweep's estimated engine steps stay under SWEEP_STEPS; the points beyond it
(long sweeps: 20,000 concurrencies), and every point of a decode-only scenario (no prompts in its steps), get the
closed form's queueing approximation instead, labelled so:
  TTFT_q = TTFT + s · u · (w_q − W(n, k))   (perfmodel/serving.py: s the queue share, u one request's share of a
           wave's prefill step, W the mean wave wait in prefills); w_q = the q-quantile, over the positions
           j = 0 … ⌈n⌉ − 1 of a synchronised wave of n = min(c, cap)/dp requests per rank prefilled k per step, of
           the position's wait min((⌊j/k⌋ + 1)·k, n) − 1 (in prefills)
  TPOT_q = ITL_q = the closed form's TPOT (equal lengths: every request decodes in the same steps; the spread of
           the steps that carry a prefill is not modelled there)
Utilisation u_kv = c / cap (cap: sequences whose KV at the mean context fits, at most max_num_seqs · dp; the
closed form's cap); with `model --simulate` its runs (4 waves, at least 200 requests, seed 0) are taken instead.
TTFT is a lower bound (`ttft_lower_bound`) at u_kv ≥ SATURATION or where c is above the KV
cap at the full isl + osl (the point's max_concurrency): the queue there grows with the run's length, and neither
a few hundred requests nor the mean-wave formula sees its tail.
What it does not: calibrate (with `model --measured` the percentiles stay the uncalibrated scenario's) or render.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel import memory
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import combine_serving, serving_parts, wave_wait
from servescope.simulate import simulate
from servescope.simulate.metrics import SimResult, Stats

SEED = 0
MAX_REQUESTS = 200  # per point, unless 2 waves of the concurrency need more
MIN_REQUESTS = 10
POINT_STEPS = 25_000  # decode steps one point's run may take (~1 µs each on the loop's decode runs: ~25 ms)
SWEEP_STEPS = 250_000  # estimated steps of all simulated points together; the rest are approximated
SATURATION = 0.9  # utilisation from which TTFT is a lower bound
QUANTILES = (50.0, 90.0, 99.0)
SIMULATION, APPROXIMATION = "simulation", "closed form"  # the precision tiers of the percentiles


@dataclass(frozen=True)
class PointPercentiles:
    """One point's percentiles (seconds; Stats.mean_s is the source's mean) and where they came from."""

    concurrency: int
    source: str  # "simulation (N requests, seed 0)" | "queueing approximation (...)"
    precision: str  # SIMULATION | APPROXIMATION
    requests: int  # simulated requests (0: approximated)
    ttft: Stats
    tpot: Stats
    itl: Stats
    utilisation: float  # c / cap
    ttft_lower_bound: bool


def point_requests(concurrency: int, osl: int, batch: int) -> int:
    """Requests one point simulates: at most POINT_STEPS decode steps (osl steps per wave of `batch`), at least
    MIN_REQUESTS, at most MAX_REQUESTS, and never fewer than two waves (2 · concurrency)."""
    by_steps = math.ceil(POINT_STEPS * max(batch, 1) / max(osl, 1))
    return max(2 * concurrency, MIN_REQUESTS, min(MAX_REQUESTS, by_steps))


def estimated_steps(requests: int, batch: int, isl: int, osl: int, budget_tokens: int) -> float:
    """Engine steps of a closed-loop run, roughly: the decode steps plus the prompt steps (simulate.budget)."""
    return requests * osl / max(batch, 1) + requests * isl / max(budget_tokens, 1)


def running_cap(sc: Scenario) -> int:
    """The closed form's cap on running sequences: KV at the mean context isl + osl/2, at most max_num_seqs · dp."""
    return int(max(min(memory.max_concurrency(sc, sc.isl + sc.osl / 2.0),
                       sc.engine.scheduler.max_num_seqs * sc.dp), 1))


def point_percentiles(sc: Scenario, concurrency: Sequence[int],
                      runs: Mapping[int, SimResult] | None = None) -> list[PointPercentiles]:
    """One PointPercentiles per concurrency (module docstring): simulated while the sweep's step estimate lasts,
    the rest approximated (one vectorised closed-form evaluation). `runs`: closed-loop runs already made at some
    concurrencies (`model --simulate`, seed 0), taken as they are."""
    given = runs or {}
    cap, kv_cap = running_cap(sc), int(memory.max_concurrency(sc))
    budget_tokens = sc.engine.scheduler.max_num_batched_tokens * sc.dp
    spent, done, rest = 0.0, {}, {}
    for i, c in enumerate(max(int(c), 1) for c in concurrency):
        util, n = c / cap, point_requests(c, sc.osl, min(c, cap))
        bound = util >= SATURATION or c > kv_cap
        steps = estimated_steps(n, min(c, cap), sc.isl, sc.osl, budget_tokens)
        if c in given:
            done[i] = _simulated(given[c], c, util, bound)
            continue
        if sc.decode_only or spent + steps > SWEEP_STEPS:
            why = "decode-only: the simulation serves prompts" if sc.decode_only else "the sweep's simulation " \
                "budget is spent"
            rest[i] = (c, util, bound, why)
            continue
        try:
            res = simulate(sc, "closed", c, n, seed=SEED)
        except ScenarioError as exc:
            rest[i] = (c, util, bound, f"simulation refused: {exc}")
            continue
        spent += steps
        done[i] = _simulated(res, c, util, bound)
    done.update(zip(rest, approximate(sc, list(rest.values())), strict=True))
    return [done[i] for i in range(len(done))]


def _simulated(res: SimResult, c: int, util: float, bound: bool) -> PointPercentiles:
    return PointPercentiles(c, f"simulation ({res.requests} requests, seed {SEED})", SIMULATION, res.requests,
                            res.ttft, res.tpot, res.itl, util, bound)


def approximate(sc: Scenario, points: Sequence[tuple[int, float, bool, str]]) -> list[PointPercentiles]:
    """The closed form's queueing approximation (module docstring) at each (concurrency, utilisation, lower bound,
    why not simulated)."""
    if not points:
        return []
    p = serving_parts(sc, [c for c, *_ in points])
    eff = sc.efficiency
    a = combine_serving(p, eff)
    wave = np.broadcast_to(combine_step(p.wave, eff)["step"], p.concurrency.shape)
    in_step = np.broadcast_to(p.in_step, p.concurrency.shape)
    lock, k = float(p.lockstep), float(p.per_step)
    share = lock + (1.0 - lock) * eff.ttft_queue_frac
    ttft, tpot = np.broadcast_to(a["ttft_s"], p.concurrency.shape), np.broadcast_to(a["tpot_s"], p.concurrency.shape)
    out, spread = [], {}
    for i, (c, util, bound, reason) in enumerate(points):
        n = max(min(float(c), float(p.cap)) / float(p.dp), 1.0)
        if n not in spread:  # the wait quantiles of the wave's positions, minus the mean wait (prefills)
            j = np.arange(math.ceil(n), dtype=float)
            waits = np.minimum((np.floor(j / k) + 1.0) * k, n) - 1.0
            spread[n] = np.percentile(waits, QUANTILES) - float(wave_wait(n, k))
        u = float(wave[i]) / eff.prefill_eff / float(in_step[i])
        t, d = float(ttft[i]), float(tpot[i])
        qs = [t + share * u * float(x) for x in spread[n]]
        flat = Stats(d, d, d, d)
        out.append(PointPercentiles(c, f"queueing approximation (closed form; {reason})", APPROXIMATION, 0,
                                    Stats(t, *qs), flat, flat, util, bound))
    return out
