"""The simulated tier of a grid sweep (planner.sweep_grid): which near points are simulated, with how many requests,
where, and without running one simulation twice.

  requests  n(c) = SIM_WAVES · c: a closed loop of c clients, each sending SIM_WAVES requests one after another
            (simulate.simulate(scenario, "closed", c, n), seed 0: exactly what `servescope simulate --arrival closed
            --concurrency c --num-prompts n` runs at the point's layout, quantisation and lengths; run as
            simulate.simulate_headline, the same numbers without the per-token gaps a sweep does not read). With equal lengths
            the loop is periodic after its first wave (all c requests start together); SIM_WAVES = 4 is `model
            --simulate`'s rule (simulate.points_prompts: 4 waves, at least 200 requests) without its floor of 200,
            which only adds samples for the percentiles of a run whose waves repeat (bench/bench_sweep_grid.py
            --part waves measures the means at 3, 4 and 16 waves)
  order     the near points that are not speculative (the simulator has no speculative decoding: a note counts
            them), the workloads' fronts first (planner.sweep_grid._to_simulate's order), then the rest by tok/s per
            GPU; `simulate_max` of them (None: all)
  once      points whose scenarios are equal (two names of one quantisation) and whose lengths and concurrency are
            equal run once (the result is copied)
  where     in this process, in `workers` processes (fork; each runs a contiguous chunk of the keys, results in key
            order), or through the caller's `spread` (the CLI's --ray: Ray tasks, one per chunk): the same runs, so
            the same document, either way
What it does not: choose points (planner.sweep_grid), or simulate a point the closed form did not price.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from servescope.errors import ServescopeError
from servescope.planner.sweep import Simulated, Sla

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario
    from servescope.simulate.metrics import Headline, SimResult

SIM_WAVES = 4
CHUNK = 16  # points per task (a Ray task, a process pool's unit of work): amortises the per-task overhead

Runner = Callable[["Scenario", int], "SimResult | Headline"]
# Runs fn(key, 0) for each key, results in key order, somewhere else (the CLI's: Ray tasks, analysis.ray_tasks)
Spread = Callable[[Callable[[str, int], "list[Simulated | str]"], list[str]], "list[list[Simulated | str]]"]


def sim_requests(concurrency: int) -> int:
    """Requests of a point's closed-loop simulation: SIM_WAVES · c (module docstring)."""
    return SIM_WAVES * max(1, int(concurrency))


@dataclass(frozen=True)
class Job:
    scenario: Scenario
    concurrency: int
    requests: int
    label: str


@dataclass(frozen=True)
class SimTask:
    """Simulations of jobs by a key "START:STOP" (a Ray task, a worker process or a plain call): a Simulated or a
    note (the point's label and why it was refused) per job."""

    jobs: tuple[Job, ...]
    sla: Sla | None
    run: Runner | None = None

    def __call__(self, key: str, _top_n: int = 0) -> list[Simulated | str]:
        a, _, b = key.partition(":")
        return [self.one(j) for j in self.jobs[int(a):int(b)]]

    def one(self, job: Job) -> Simulated | str:
        try:
            res = (self.run(job.scenario, job.concurrency) if self.run is not None
                   else _closed(job.scenario, job.concurrency, job.requests))
        except ServescopeError as e:
            return f"{job.label}: not simulated: {e}"
        met = (self.sla or Sla()).met(res.ttft.mean_s, res.tpot.mean_s)
        return Simulated(res.requests, res.ttft.mean_s, res.ttft.p99_s, res.tpot.mean_s, res.tpot.p99_s,
                         res.output_tok_s, met)


def _closed(sc: Scenario, c: int, n: int) -> Headline:
    """simulate(sc, "closed", c, n)'s requests, TTFT, TPOT and output tok/s (simulate.simulate_headline: the same
    numbers without the pooled inter-token gaps and the summaries a sweep does not read)."""
    from servescope.simulate import simulate_headline

    return simulate_headline(sc, "closed", c, n)


def keys(n: int, chunk: int = CHUNK) -> list[str]:
    """"START:STOP" chunks of `chunk` jobs covering range(n)."""
    return [f"{a}:{min(a + chunk, n)}" for a in range(0, n, chunk)]


_TASK: SimTask | None = None  # the task a forked worker inherits (no pickling of the jobs)


def _worker(key: str) -> list[Simulated | str]:
    assert _TASK is not None
    return _TASK(key)


def run_task(task: SimTask, spread: Spread | None = None, workers: int = 1) -> list[Simulated | str]:
    """Every job of `task`, in order: through `spread` (Ray), in `workers` forked processes, or here."""
    ks = keys(len(task.jobs))
    if spread is not None:
        def fn(key: str, top_n: int) -> list[Simulated | str]:  # a plain function: what Ray can make a remote of
            return task(key, top_n)

        chunks = spread(fn, ks)
    elif workers > 1 and len(ks) > 1 and hasattr(os, "fork"):
        import multiprocessing as mp

        global _TASK
        _TASK = task
        try:
            with mp.get_context("fork").Pool(min(workers, len(ks))) as pool:
                chunks = pool.map(_worker, ks, chunksize=1)
        finally:
            _TASK = None
    else:
        chunks = [task(k) for k in ks]
    return [o for ch in chunks for o in ch]


def dedupe(jobs: list[tuple[int, Job]]) -> tuple[list[Job], list[int]]:
    """Distinct jobs (by configuration class, lengths, concurrency, requests) and, for each input job, the index of
    its distinct one. `jobs`: (class of the configuration's scenario, job) — equal classes: equal scenarios."""
    seen: dict[tuple[int, int, int, int, int], int] = {}
    out: list[Job] = []
    where = []
    for cls, j in jobs:
        key = (cls, j.scenario.isl, j.scenario.osl, j.concurrency, j.requests)
        if key not in seen:
            seen[key] = len(out)
            out.append(j)
        where.append(seen[key])
    return out, where
