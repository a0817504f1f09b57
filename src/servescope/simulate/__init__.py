"""Step-level discrete-event simulation of one serving-engine instance: TTFT/TPOT/ITL/E2E percentiles.

What it does: continuous batching with each engine's scheduler knobs and defaults (engine.py: the scenario's engine
record, specs.engines — engine, release and GPU memory, a source per value — the one the closed form reads), KV
blocks with preemption by recompute, a benchmark client (closed loop / Poisson / burst, workload.py), each step
timed by the analytical step model for its exact composition (stepcost.py, the one adapter to perfmodel.step), then
percentiles and a timeline (metrics.py).
Every `model` point's p50/p90/p99 (percentiles.py): a short seeded closed-loop run per concurrency, or the
closed form's queueing approximation where the sweep's step budget is spent, labelled with which (imported from
there: it runs `simulate` below).
Prefix caching (prefix.py): a hit rate or a shared prefix skips whole KV blocks of prefill; shared blocks are
counted once.
KV offload (offload.py): a host tier that swaps preempted requests' KV over PCIe instead of recomputing.
What it does not: model the network or the HTTP server, speculative decoding, disaggregated
prefill/decode, or several engine instances behind a router.

    res = simulate(Scenario.build(...), arrival="closed", concurrency=64, num_prompts=1000)
    res.ttft.p99_s, res.output_tok_s
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from servescope.perfmodel.scenario import Scenario
from servescope.simulate.budget import check_memory, check_time, run_shape
from servescope.simulate.engine import EngineConfig, scheduler_config
from servescope.simulate.loop import Progress, RawRun, simulate_raw
from servescope.simulate.metrics import Headline, Queueing, SimResult, Stats, headline, summarise
from servescope.simulate.offload import Offload, offload_for
from servescope.simulate.prefix import check_hit_rate
from servescope.simulate.workload import (
    Arrival,
    Workload,
    build_workload,
    draw_lengths,
    replay_workload,
)

__all__ = [
    "Arrival", "EngineConfig", "Headline", "Queueing", "RawRun", "SimResult", "Stats", "Workload", "build_workload",
    "draw_lengths", "engine_for", "replay_workload", "scheduler_config", "simulate", "simulate_headline", "simulate_points",
    "simulate_workload",
]


def engine_for(sc: Scenario, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None,
               **more: Any) -> EngineConfig:
    """The scenario's engine defaults (its backend, release and GPU memory: `sc.engine`) with the given knobs
    replaced (None keeps the default)."""
    return scheduler_config(sc.engine).with_(max_num_seqs=max_num_seqs,
                                             max_num_batched_tokens=max_num_batched_tokens, **more)


def simulate_workload(sc: Scenario, wl: Workload, engine: EngineConfig | None = None,
                      kv_cache_tokens: int | None = None, progress: Progress | None = None,
                      memory_limit_bytes: int | None = None, time_limit_s: float | None = None,
                      kv_offload_bytes: float = 0.0) -> SimResult:
    """Simulate a prepared workload (sc: perfmodel Scenario), with a host KV tier of `kv_offload_bytes`
    (offload.py: preemptions copy KV out and back over PCIe instead of recomputing). kv_cache_tokens overrides the modelled KV
    capacity (e.g. the 'GPU KV cache size: N tokens' an engine logs). A run whose estimated memory
    (simulate.budget) is above `memory_limit_bytes` (None: budget.DEFAULT_LIMIT_BYTES), or whose estimated time
    is above `time_limit_s` (None: no limit), is refused first."""
    cfg = engine or engine_for(sc)
    raw, offload = _run(sc, wl, cfg, kv_cache_tokens, progress, memory_limit_bytes, time_limit_s, kv_offload_bytes)
    knobs = {k: v for k, v in asdict(cfg).items() if k != "sources" and not (k == "rank_wait_s" and v is None)}
    settings: dict[str, object] = {"engine": knobs, "arrival": wl.arrival.label(), "concurrency": wl.max_in_flight,
                "num_prompts": wl.n, "mean_isl": float(np.mean(wl.isl)), "mean_osl": float(np.mean(wl.osl))}
    if wl.prefix_hit_rate or wl.shared_prefix_tokens:
        settings.update(prefix_hit_rate=wl.prefix_hit_rate, shared_prefix_tokens=wl.shared_prefix_tokens)
    if offload is not None:
        settings["kv_offload"] = {"size_bytes": offload.size_bytes, "host_blocks": offload.host_blocks,
                                  "pcie_bw_bytes_per_s": offload.pcie_bw_bytes_per_s,
                                  "pcie_bw_source": sc.gpu.sources.get("pcie_bw", "")}
    return summarise(raw, settings)


def _run(sc: Scenario, wl: Workload, cfg: EngineConfig, kv_cache_tokens: int | None, progress: Progress | None,
         memory_limit_bytes: int | None, time_limit_s: float | None, kv_offload_bytes: float,
         itl: bool = True) -> tuple[RawRun, Offload | None]:
    """The run's memory and time checked (simulate.budget), then the loop (loop.simulate_raw; `itl` as there)."""
    shape = run_shape(wl.n, float(np.mean(wl.isl)), float(np.mean(wl.osl)), int((wl.isl + wl.osl).max()),
                      wl.max_in_flight, cfg.max_num_seqs, cfg.max_num_batched_tokens, int(sc.dp))
    check_memory(shape, memory_limit_bytes)
    check_time(shape, time_limit_s)
    blocks = None if kv_cache_tokens is None else max(kv_cache_tokens // cfg.block_size_tokens, 0)
    offload = offload_for(sc, cfg.block_size_tokens, kv_offload_bytes)
    return simulate_raw(sc, cfg, wl, progress=progress, total_blocks=blocks, offload=offload, itl=itl), offload


def simulate(sc: Scenario, arrival: str | Arrival = "closed", concurrency: int | None = None, num_prompts: int = 1000,
             lengths: tuple[np.ndarray, np.ndarray] | None = None, range_ratio: float = 1.0, seed: int = 0,
             engine: EngineConfig | None = None, kv_cache_tokens: int | None = None,
             progress: Progress | None = None, memory_limit_bytes: int | None = None,
             time_limit_s: float | None = None, prefix_hit_rate: float = 0.0,
             shared_prefix_tokens: int = 0, kv_offload_bytes: float = 0.0) -> SimResult:
    """One simulated benchmark run, with prefix caching at a hit rate or a prefix every prompt shares (prefix.py).
     Lengths: the given (isl, osl) arrays (cycled), else sc.isl/sc.osl, drawn
    uniformly in [range_ratio·len, len] when range_ratio < 1 (seeded). The run's memory and time are estimated
    before any per-request array exists (simulate.budget; `burst:1000000000` is refused here, not by NumPy; a run
    estimated above `time_limit_s` too)."""
    cfg = engine or engine_for(sc)
    wl = _workload(sc, cfg, arrival, concurrency, num_prompts, lengths, range_ratio, seed, memory_limit_bytes,
                   time_limit_s, prefix_hit_rate, shared_prefix_tokens)
    return simulate_workload(sc, wl, cfg, kv_cache_tokens, progress, memory_limit_bytes, time_limit_s,
                             kv_offload_bytes)


def simulate_headline(sc: Scenario, arrival: str | Arrival = "closed", concurrency: int | None = None,
                      num_prompts: int = 1000, seed: int = 0, memory_limit_bytes: int | None = None) -> Headline:
    """`simulate(sc, arrival, concurrency, num_prompts, seed=seed)`'s requests, duration, output tok/s, TTFT and
    TPOT (metrics.Headline: the same numbers, computed by the same code) without the inter-token gaps, boundaries,
    parts and timeline a grid sweep does not read (planner.sweep_sims)."""
    cfg = engine_for(sc)
    wl = _workload(sc, cfg, arrival, concurrency, num_prompts, None, 1.0, seed, memory_limit_bytes, None, 0.0, 0)
    raw, _ = _run(sc, wl, cfg, None, None, memory_limit_bytes, None, 0.0, itl=False)
    return headline(raw)


def _workload(sc: Scenario, cfg: EngineConfig, arrival: str | Arrival, concurrency: int | None, num_prompts: int,
              lengths: tuple[np.ndarray, np.ndarray] | None, range_ratio: float, seed: int,
              memory_limit_bytes: int | None, time_limit_s: float | None, prefix_hit_rate: float,
              shared_prefix_tokens: int) -> Workload:
    """simulate's workload, its memory and time checked before any per-request array exists."""
    arr = arrival if isinstance(arrival, Arrival) else Arrival.parse(arrival)
    n = arr.burst if arr.kind == "burst" else num_prompts
    if lengths is None:
        mean_isl, mean_osl, longest = float(sc.isl), float(sc.osl), int(sc.isl) + int(sc.osl)  # upper bounds
    else:
        mean_isl, mean_osl = float(np.mean(lengths[0])), float(np.mean(lengths[1]))
        longest = int(np.max(lengths[0] + lengths[1])) if len(lengths[0]) == len(lengths[1]) else 0
    cap = None if arr.kind == "burst" else concurrency
    shape = run_shape(max(n, 1), mean_isl, mean_osl, longest, cap, cfg.max_num_seqs, cfg.max_num_batched_tokens,
                      int(sc.dp))
    check_memory(shape, memory_limit_bytes)
    check_time(shape, time_limit_s)
    if lengths is None:
        lengths = draw_lengths(max(n, 1), sc.isl, sc.osl, range_ratio, seed)
    return replace(build_workload(arr, num_prompts, concurrency, lengths[0], lengths[1], seed),
                   prefix_hit_rate=check_hit_rate(prefix_hit_rate), shared_prefix_tokens=int(shared_prefix_tokens))


def points_prompts(concurrency: int) -> int:
    """Requests per simulated point of `model --simulate`: 4 waves of the concurrency, at least 200."""
    return max(4 * concurrency, 200)


def simulate_points(sc: Scenario, concurrency: list[int], engine: EngineConfig | None = None,
                    progress: Callable[[int], None] | None = None,
                    memory_limit_bytes: int | None = None) -> list[SimResult]:
    """A closed-loop simulation at each concurrency (sc.isl/sc.osl fixed lengths), for `model --simulate`. Every
    point's memory is estimated before the first one runs (a list ending in 1000000 fails at once, not after the
    others); `progress(points done)` after each."""
    cfg = engine or engine_for(sc)
    for c in concurrency:
        check_memory(run_shape(points_prompts(c), float(sc.isl), float(sc.osl), int(sc.isl) + int(sc.osl), c,
                               cfg.max_num_seqs, cfg.max_num_batched_tokens, int(sc.dp)), memory_limit_bytes)
    out = []
    for done, c in enumerate(concurrency, 1):
        out.append(simulate(sc, "closed", c, points_prompts(c), engine=engine, memory_limit_bytes=memory_limit_bytes))
        if progress is not None:
            progress(done)
    return out
