"""Summaries of a simulated run: latency percentiles, throughput, queueing, and the timeline.

Definitions follow `vllm bench serve` / `sglang.bench_serving` (docs/simulate.md), all times from the client:
  TTFT   first token − send (front end, engine queue, prefill, first-token delivery: boundaries.py)
  TPOT   per request (E2E − TTFT) / (output tokens − 1); requests with one output token are skipped
  ITL    gaps between successive tokens of each request, pooled over all requests
  E2E    finish − send
  request throughput = requests / duration, output tok/s = Σ output tokens / duration, duration = first send to
  last finish. Percentiles: numpy linear interpolation, as the benchmarks compute them.
Boundaries, as the engines' own histograms split a request (vLLM /metrics; validation.metrics):
  queue    first scheduled − schedulable (sent + the front end's set-up; vllm:request_queue_time_seconds)
  prefill  the engine's first token − first scheduled (vllm:request_prefill_time_seconds; chunks and any
           re-prefill included)
  decode   last token − first token (vllm:request_decode_time_seconds)
  ttft, itl, e2e as above (client times: the engine's plus the front end before and the delivery after)
Parts (boundaries.py): each request's TTFT and TPOT split into front end, queue, prefill, delivery and GPU, host,
rank wait, overlap, stall; `parts` their mean/p50/p90/p99, `samples` the per-request values (`part:<name>`).
Queueing: a request is queued when it was schedulable at a step start but was not admitted in that step; the
wait is first admission − becoming schedulable.
What it does not: run the simulation (loop.py) or render anything (report/simulate_*.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from servescope.simulate.boundaries import Parts, split_requests
from servescope.simulate.loop import RawRun
from servescope.units import MS_PER_S

TIMELINE_POINTS = 200


@dataclass(frozen=True)
class Stats:
    """mean / p50 / p90 / p99 of one latency, seconds (NaN when there is nothing to summarise)."""

    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    @staticmethod
    def of(x: np.ndarray) -> Stats:
        x = x[np.isfinite(x)]  # a copy (boolean index): the percentiles partition it in place, after the mean
        if not len(x):
            return Stats(float("nan"), float("nan"), float("nan"), float("nan"))
        mean = float(x.mean())
        p50, p90, p99 = np.percentile(x, [50, 90, 99], overwrite_input=True)
        return Stats(mean, float(p50), float(p90), float(p99))


@dataclass(frozen=True)
class Queueing:
    queued: int  # requests that waited at least one step start for admission
    mean_wait_s: float  # over the queued requests
    max_wait_s: float
    preemptions: int  # preemptions (recompute) over the run
    preempted_requests: int


@dataclass(frozen=True)
class SimResult:
    requests: int
    duration_s: float
    request_throughput_per_s: float
    output_tok_s: float
    ttft: Stats
    tpot: Stats
    itl: Stats
    e2e: Stats
    queueing: Queueing
    mean_in_flight: float  # Σ E2E / duration (Little's law: mean requests in the system)
    max_step_s: float  # longest engine step of the run
    kv_capacity_tokens: int
    timeline: dict[str, list[float]]
    settings: dict[str, object] = field(default_factory=dict)  # engine knobs and workload, as used
    warnings: tuple[str, ...] = ()
    boundaries: dict[str, Stats] = field(default_factory=dict)  # queue, prefill, decode, ttft, itl, e2e (above)
    samples: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)  # per boundary
    prefix: dict[str, float] = field(default_factory=dict)  # prefix caching: prompt / prefill / cached tokens
    parts: dict[str, Stats] = field(default_factory=dict)  # TTFT and TPOT by boundary (boundaries.py)
    part_sources: dict[str, str] = field(default_factory=dict)  # where each part came from


def part_stats(parts: Parts) -> dict[str, Stats]:
    """mean / p50 / p90 / p99 of every part (Stats.of's definition: over the finite values), one
    percentile call per side (the TPOT parts are finite on the same requests)."""
    out: dict[str, Stats] = {}
    for side in (parts.ttft, parts.tpot):
        names = list(side)
        x = np.stack([side[k] for k in names])
        x = x[:, np.isfinite(x).all(axis=0)]
        if not x.shape[1]:
            out.update({k: Stats.of(np.zeros(0)) for k in names})
            continue
        q = np.percentile(x, [50, 90, 99], axis=1)
        out.update({k: Stats(float(x[i].mean()), float(q[0, i]), float(q[1, i]), float(q[2, i]))
                    for i, k in enumerate(names)})
    return out


def per_request(raw: RawRun) -> dict[str, np.ndarray]:
    """TTFT, E2E and TPOT (s) per request, as the client sees them (the engine's times + the delivery)."""
    ttft = raw.first_token_s + raw.delivery_s - raw.sent_s
    e2e = raw.finish_s + raw.delivery_s - raw.sent_s
    tpot = np.where(raw.osl > 1, (e2e - ttft) / np.maximum(raw.osl - 1, 1), np.nan)
    return {"ttft": ttft, "e2e": e2e, "tpot": tpot}


def boundary_samples(raw: RawRun) -> dict[str, np.ndarray]:
    """Per-request seconds of each boundary (module docstring); ITL pooled over requests."""
    r = per_request(raw)
    return {"ttft": r["ttft"], "queue": np.maximum(raw.first_sched_s - raw.sent_s - raw.setup_s, 0.0),
            "prefill": raw.first_token_s - raw.first_sched_s, "decode": raw.finish_s - raw.first_token_s,
            "itl": raw.itl_s, "tpot": r["tpot"], "e2e": r["e2e"]}


def prefix_summary(raw: RawRun) -> dict[str, float]:
    """Mean prompt, prefill (recompute included) and cached tokens per request, and the cached share of the
    prompt tokens; empty when prefix caching was off."""
    if raw.cached_tokens is None or raw.prefill_tokens is None:
        return {}
    prompt = float(raw.isl.sum())
    return {"mean_prompt_tokens": float(raw.isl.mean()), "mean_prefill_tokens": float(raw.prefill_tokens.mean()),
            "mean_cached_tokens": float(raw.cached_tokens.mean()),
            "cached_frac": float(raw.cached_tokens.sum()) / prompt if prompt else 0.0}


def queueing(raw: RawRun) -> Queueing:
    wait = raw.first_sched_s - raw.considered_s
    q = wait > 1e-12
    return Queueing(
        queued=int(q.sum()), mean_wait_s=float(wait[q].mean()) if q.any() else 0.0,
        max_wait_s=float(wait.max()) if len(wait) else 0.0, preemptions=int(raw.preemptions.sum()),
        preempted_requests=int((raw.preemptions > 0).sum()),
    )


def timeline(raw: RawRun, points: int = TIMELINE_POINTS) -> dict[str, list[float]]:
    """The per-step records, thinned to at most `points` evenly spaced steps."""
    n = len(raw.step_t_s)
    idx = np.unique(np.linspace(0, n - 1, min(points, n)).astype(int)) if n else np.zeros(0, dtype=int)
    cap = max(raw.total_blocks, 1)
    return {
        "t_s": raw.step_t_s[idx].tolist(),
        "running": raw.step_running[idx].astype(float).tolist(),
        "waiting": raw.step_waiting[idx].astype(float).tolist(),
        "step_tokens": raw.step_tokens[idx].astype(float).tolist(),
        "kv_used_frac": (raw.step_kv_blocks[idx] / cap).tolist(),
        "step_ms": (raw.step_dur_s[idx] * MS_PER_S).tolist(),
    }


@dataclass(frozen=True)
class Headline:
    """What a grid sweep reads of a run (planner.sweep_sims): SimResult's fields of the same names, computed by
    the same code (summarise calls `headline`), without the ITL, boundaries, parts and timeline."""

    requests: int
    duration_s: float
    output_tok_s: float
    ttft: Stats
    tpot: Stats


def headline(raw: RawRun, r: dict[str, np.ndarray] | None = None) -> Headline:
    """Requests, duration (first send to last finish, as the client holds it), output tok/s, TTFT and TPOT
    Stats; `r`: per_request(raw) when the caller has it."""
    r = per_request(raw) if r is None else r
    start, end = float(np.nanmin(raw.sent_s)), float(np.nanmax(raw.finish_s)) + raw.delivery_s
    dur = max(end - start, 1e-12)
    return Headline(len(raw.isl), dur, float(raw.osl.sum()) / dur, Stats.of(r["ttft"]), Stats.of(r["tpot"]))


def summarise(raw: RawRun, settings: dict[str, object] | None = None) -> SimResult:
    r = per_request(raw)
    h = headline(raw, r)
    dur = h.duration_s
    q = queueing(raw)
    samples = boundary_samples(raw)
    parts = split_requests(raw, r["ttft"], r["tpot"])
    itl, e2e = Stats.of(raw.itl_s), Stats.of(r["e2e"])  # once each (the pooled gaps: a run's largest array)
    known = {"itl": itl, "ttft": h.ttft, "tpot": h.tpot, "e2e": e2e}  # boundaries of the same samples
    samples.update({f"part:{k}": v for k, v in (parts.ttft | parts.tpot).items()})
    warnings = []
    if q.queued:
        warnings.append(f"{q.queued} of {len(raw.isl)} requests queued in the engine before their first step: "
                        f"mean wait {q.mean_wait_s:.3g} s, longest {q.max_wait_s:.3g} s")
    if q.preemptions:
        how = "recompute" if not raw.swap_blocks else "swapped to the host tier where it had room, else recompute"
        warnings.append(f"KV cache full: {q.preemptions} preemptions ({how}) of {q.preempted_requests} requests")
    if raw.swap_blocks:
        warnings.append(f"KV offload: {raw.swap_blocks:,} blocks copied between GPU and host (out and back), "
                        f"{raw.swap_s:.3g} s of steps spent copying")
    return SimResult(
        requests=h.requests, duration_s=dur, request_throughput_per_s=len(raw.isl) / dur,
        output_tok_s=h.output_tok_s, ttft=h.ttft, tpot=h.tpot,
        itl=itl, e2e=e2e, queueing=q, mean_in_flight=float(np.nansum(r["e2e"])) / dur,
        max_step_s=float(raw.step_dur_s.max()) if len(raw.step_dur_s) else 0.0,
        kv_capacity_tokens=raw.total_blocks * raw.block_size_tokens, timeline=timeline(raw),
        settings=dict(settings or {}), warnings=tuple(warnings),
        boundaries={k: known[k] if k in known else Stats.of(v) for k, v in samples.items()
                    if not k.startswith("part:")},
        samples=samples,
        prefix=prefix_summary(raw), parts=part_stats(parts),
        part_sources=parts.sources,
    )


def flat_metrics(res: SimResult) -> dict[str, float]:
    """The result under benchfile's metric names: `ttft_ms.p50`, ..., `output_tok_s`, `duration_s`."""
    out: dict[str, float] = {}
    for name, st in (("ttft_ms", res.ttft), ("tpot_ms", res.tpot), ("itl_ms", res.itl), ("e2e_ms", res.e2e)):
        for stat, v in (("mean", st.mean_s), ("p50", st.p50_s), ("p90", st.p90_s), ("p99", st.p99_s)):
            out[f"{name}.{stat}"] = v * MS_PER_S
    out.update(output_tok_s=res.output_tok_s, request_throughput_per_s=res.request_throughput_per_s,
               duration_s=res.duration_s)
    return out
