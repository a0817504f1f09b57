"""Workload of a simulated benchmark: when each request is sent and how long its prompt and output are.

Arrivals (client side, as `vllm bench serve` / `sglang.bench_serving` send them):
  closed      every request scheduled at t = 0 behind a client cap of `concurrency` in-flight requests: c start
              at once and each finished request is replaced at once (`--max-concurrency c`, request rate inf)
  poisson:R   Poisson process of rate R req/s (exponential gaps, seeded), optionally capped by `concurrency`
  burst:N     N requests at t = 0, no cap (request rate inf, no --max-concurrency)
Lengths: fixed (isl, osl); uniform with a range ratio r (each length drawn from [r·len, len], as the benchmarks'
`--random-range-ratio`); or given as arrays (a file of `isl,osl` lines: validation.benchio.read_lengths).
Prefix reuse: a hit rate or a prefix every prompt shares (the workload's fields; prefix.py prices them).
What it does not: run anything (loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servescope.errors import ScenarioError


@dataclass(frozen=True)
class Arrival:
    kind: str  # "closed" | "poisson" | "burst" | "replay" (send times given per request)
    rate_per_s: float = 0.0  # poisson only
    burst: int = 0  # burst only: number of requests

    @staticmethod
    def parse(text: str) -> Arrival:
        """'closed', 'poisson:RATE' or 'burst:N' -> Arrival; ScenarioError with the expected forms otherwise."""
        kind, _, arg = text.strip().partition(":")
        try:
            if kind == "closed" and not arg:
                return Arrival("closed")
            if kind == "poisson" and float(arg) > 0:
                return Arrival("poisson", rate_per_s=float(arg))
            if kind == "burst" and int(arg) >= 1:
                return Arrival("burst", burst=int(arg))
        except ValueError:
            pass
        raise ScenarioError(f"arrival {text!r}: expected closed, poisson:RATE (req/s > 0) or burst:N (N >= 1)")

    def label(self) -> str:
        return {"closed": "closed", "poisson": f"poisson:{self.rate_per_s:g}", "burst": f"burst:{self.burst}",
                "replay": "replay"}[self.kind]


@dataclass(frozen=True)
class Workload:
    """Per request: scheduled send time (s), prompt and output tokens; plus the client's in-flight cap."""

    sched_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    max_in_flight: int | None
    arrival: Arrival
    prefix_hit_rate: float = 0.0  # prefix caching (prefix.py): share of each prompt found cached, in whole blocks
    shared_prefix_tokens: int = 0  # ... or tokens every prompt shares (`--workload shared-prefix:LEN`)

    @property
    def n(self) -> int:
        return len(self.isl)


def draw_lengths(n: int, isl: int, osl: int, range_ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n (isl, osl) pairs: fixed when range_ratio == 1, else uniform integers in [ratio·len, len] (at least 1)."""
    if not 0.0 <= range_ratio <= 1.0:
        raise ScenarioError(f"range ratio {range_ratio} must be within [0, 1]")
    if isl < 1 or osl < 1:
        raise ScenarioError(f"isl={isl} and osl={osl} must be >= 1")
    if range_ratio == 1.0:
        return np.full(n, isl, dtype=np.int64), np.full(n, osl, dtype=np.int64)
    rng = np.random.default_rng(seed)
    lo_i, lo_o = max(1, int(range_ratio * isl)), max(1, int(range_ratio * osl))
    return rng.integers(lo_i, isl + 1, n), rng.integers(lo_o, osl + 1, n)


def build_workload(arrival: Arrival, num_prompts: int, concurrency: int | None, isl: np.ndarray,
                   osl: np.ndarray, seed: int = 0) -> Workload:
    """The schedule of `num_prompts` requests (lengths cycled if fewer are given); burst:N sets the count."""
    n = arrival.burst if arrival.kind == "burst" else num_prompts
    if n < 1:
        raise ScenarioError(f"num_prompts={n} must be >= 1")
    if concurrency is not None and concurrency < 1:
        raise ScenarioError(f"concurrency={concurrency} must be >= 1")
    reps = -(-n // len(isl))
    li, lo = np.tile(isl, reps)[:n], np.tile(osl, reps)[:n]
    if arrival.kind == "poisson":
        gaps = np.random.default_rng(seed).exponential(1.0 / arrival.rate_per_s, n)
        sched = np.cumsum(gaps) - gaps[0]
        cap = concurrency
    else:
        sched = np.zeros(n)
        cap = concurrency if arrival.kind == "closed" else None
        if arrival.kind == "closed" and cap is None:
            raise ScenarioError("closed-loop arrival needs a concurrency")
    return Workload(sched, li.astype(np.int64), lo.astype(np.int64), cap, arrival)


def replay_workload(send_s: np.ndarray, isl: np.ndarray, osl: np.ndarray,
                    concurrency: int | None = None) -> Workload:
    """Requests sent at the given times (seconds, any origin: the first send becomes t = 0, order kept as given
    after a stable sort by time), with their own prompt and output lengths; `concurrency` caps in-flight requests
    like the benchmark's --max-concurrency (None: none)."""
    if not (len(send_s) == len(isl) == len(osl)) or not len(send_s):
        raise ScenarioError("replay: send times, input and output lengths must be non-empty and of one length")
    if not np.isfinite(send_s).all() or (np.asarray(isl) < 1).any() or (np.asarray(osl) < 1).any():
        raise ScenarioError("replay: send times must be finite and lengths >= 1")
    order = np.argsort(send_s, kind="stable")
    sched = np.asarray(send_s, dtype=float)[order]
    return Workload(sched - sched[0], np.asarray(isl, dtype=np.int64)[order], np.asarray(osl, dtype=np.int64)[order],
                    concurrency, Arrival("replay"))
