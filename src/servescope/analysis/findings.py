"""Findings: what a breakdown says is wrong or notable, each with the numbers that support it.

Does: apply documented thresholds to per-kind summaries (communication-bound, low occupancy, launch/CPU-bound, idle
inside graph replays, cast overhead, graph vs eager), to the idle between consecutive steps (step_gap), and compare
ranks (skew); `find_all` ranks them with any others given (analysis.headroom's kernel findings). Every finding
names its denominator.
Does not: compute times (breakdown does) or recommend with predicted gains (the planner does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from servescope.analysis.breakdown import (
    COMMUNICATION,
    KindSummary,
    TraceBreakdown,
    gaps_after_steps_us,
)

# Thresholds, as shares of GPU busy time (or of step GPU span for idle). Chosen so that a finding means
# "this is where a fix pays": below ~10% a class rarely justifies work; comm ≥ 25% of busy is the point where
# vLLM/SGLang users start reaching for custom all-reduce or EP (see docs/metrics.md).
COMM_SHARE_LOW, COMM_SHARE_MEDIUM, COMM_SHARE_HIGH = 0.15, 0.25, 0.40
LOW_OCC_MIN_SHARE = 0.10
IDLE_SHARE_MEDIUM, IDLE_SHARE_HIGH = 0.20, 0.40
CAST_SHARE_MEDIUM, CAST_SHARE_HIGH = 0.10, 0.30
SKEW_SHARE_MEDIUM = 0.10
# GPU idle between consecutive steps, as a share of the step cycle: a serving step's CPU work is ~1-2 ms against
# decode steps of ~5-20 ms, so 10 % is already a visible cost (the planner's async_scheduling track prices it)
STEP_GAP_SHARE_LOW, STEP_GAP_SHARE_MEDIUM, STEP_GAP_SHARE_HIGH = 0.10, 0.20, 0.40


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # high | medium | low | info
    message: str
    evidence: dict[str, float | int | str | None]
    rank: int | None = None
    kind: str | None = None
    mitigations: tuple[str, ...] = field(default=())


def _time(us: float) -> str:
    """A duration in a message, in the unit that keeps it short: 712 µs, 46.7 ms, 1.25 s (the data keep µs)."""
    if us < 1e3:
        return f"{us:.0f} µs"
    return f"{us / 1e3:.1f} ms" if us < 1e6 else f"{us / 1e6:.2f} s"


def _kind_phrase(kind: str) -> str:
    """`unknown` steps are ProfilerStep#N or idle-gap segments: their label does not say prefill or decode."""
    return "unknown-kind" if kind == "unknown" else kind


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _severity(share: float, medium: float, high: float) -> str | None:
    if share >= high:
        return "high"
    return "medium" if share >= medium else None


def communication_bound(s: KindSummary, rank: int | None) -> Finding | None:
    comm_us = s.classes_us.get(COMMUNICATION, 0.0)
    share = _share(comm_us, s.gpu_busy_us)
    severity = _severity(share, COMM_SHARE_MEDIUM, COMM_SHARE_HIGH) or ("low" if share >= COMM_SHARE_LOW else None)
    if severity is None or not s.collectives:
        return None
    name, top = max(s.collectives.items(), key=lambda kv: kv[1].total_us)
    per_step = s.calls_per_step(name)
    per_token = s.calls_per_token(name)
    message = (
        f"communication is {_pct(share)} of {_kind_phrase(s.kind)} GPU busy time "
        f"({_pct(_share(s.comm_exposed_us, s.gpu_busy_us))} exposed, not hidden under compute); {name} kernels "
        f"sum to {_pct(_share(top.total_us, s.gpu_busy_us))} of it: {per_step:.0f} calls per step at "
        f"~{_time(top.median_us)} each (median)"
    )
    return Finding(
        "communication_bound", severity, message,
        {"comm_share_of_busy": share, "comm_exposed_share_of_busy": _share(s.comm_exposed_us, s.gpu_busy_us),
         "collective": name, "calls_per_step": per_step, "calls_per_generated_token": per_token,
         "median_us": top.median_us, "p90_us": top.p90_us, "total_us": top.total_us, "busy_us": s.gpu_busy_us},
        rank, s.kind, ("custom_allreduce", "collective_fusion", "expert_parallel", "nccl_tuning"),
    )


def low_occupancy(s: KindSummary, rank: int | None, num_sms: int | None) -> list[Finding]:
    out = []
    for k in s.top_kernels:
        share = _share(k.total_us, s.gpu_busy_us)
        if k.kernel_class == COMMUNICATION or k.blocks_per_sm is None or share < LOW_OCC_MIN_SHARE:
            continue
        if k.blocks_per_sm >= 1.0:
            continue
        sms = f" on {num_sms} SMs" if num_sms else ""
        blocks = f"{k.grid_blocks} blocks{sms}" if k.grid_blocks else "a small grid"
        out.append(Finding(
            "low_occupancy", "high" if share >= 0.3 else "medium",
            f"one {k.kernel_class} kernel takes {_pct(share)} of {_kind_phrase(s.kind)} GPU busy time with {blocks} "
            f"({k.blocks_per_sm:.2f} blocks per SM): most SMs sit idle while it runs — {k.name[:80]}",
            {"kernel": k.name, "kernel_class": k.kernel_class, "share_of_busy": share, "blocks_per_sm": k.blocks_per_sm,
             "grid_blocks": k.grid_blocks, "num_sms": num_sms, "calls": k.calls, "median_us": k.median_us,
             "waves": k.waves, "tail_efficiency": k.tail_efficiency, "total_us": k.total_us},
            rank, s.kind, ("split_k_attention",) if k.kernel_class == "attention" else (),
        ))
    return out


# Launch calls that explain at least this share of a step's GPU idle make it launch-bound; below it the GPU waits
# on other host work (Python op dispatch, scheduling, sampling, synchronisation): a CUDA graph still removes the
# dispatch of what it captures, but not the engine's work between steps (async scheduling overlaps that).
LAUNCH_EXPLAINS_IDLE = 0.5


def launch_bound(s: KindSummary, rank: int | None) -> Finding | None:
    """Idle inside the step span outside graph replays, split by its cause: `launch_bound` when the CPU's
    kernel-launch calls explain at least LAUNCH_EXPLAINS_IDLE of the idle (eager steps), else `host_bound` (host work
    other than launching; between graph replays always host work: a replay is one launch). Idle inside a replay is
    neither (`graph_replay_idle`)."""
    idle = max(0.0, s.idle_us - s.graph_idle_us)
    share = _share(idle, s.gpu_span_us)
    severity = _severity(share, IDLE_SHARE_MEDIUM, IDLE_SHARE_HIGH)
    if severity is None:
        return None
    graphs = s.graph_launches > 0
    per_step = max(s.steps, 1)
    explained = min(1.0, _share(s.launch_cpu_us, idle)) if idle > 0 else 0.0
    launches = (f"{s.launches / per_step:.0f} launches per step, {_time(s.launch_cpu_us / per_step)} of launch calls "
                f"on the CPU per step ({_pct(explained)} of the idle)")
    fix: tuple[str, ...]
    if not graphs and explained >= LAUNCH_EXPLAINS_IDLE:
        code, cause, fix = "launch_bound", "between kernel launches", ("cuda_graphs",)
    elif graphs:
        code, cause, fix = "host_bound", "between graph replays (CPU scheduling, sampling)", ("async_scheduling",)
    else:
        code, cause, fix = ("host_bound", "waiting on host work other than launching (Python op dispatch, "
                            "scheduling, sampling, synchronisation)", ("cuda_graphs", "async_scheduling"))
    return Finding(
        code, severity, f"the GPU idles {_pct(share)} of the {_kind_phrase(s.kind)} step span {cause}: {launches}",
        {"idle_share_of_span": share, "idle_us": idle, "span_us": s.gpu_span_us, "graph_idle_us": s.graph_idle_us,
         "launches_per_step": s.launches / per_step, "launch_cpu_us_per_step": s.launch_cpu_us / per_step,
         "graph_launches": s.graph_launches, "launch_share_of_idle": explained},
        rank, s.kind, fix,
    )


def graph_replay_idle(s: KindSummary, rank: int | None) -> Finding | None:
    """Idle inside graph replays (between the kernels of one replay: dependencies, event waits, graph node gaps):
    the CPU launched the whole graph at once, so no launch or host work explains it; thresholds as launch_bound."""
    share = _share(s.graph_idle_us, s.gpu_span_us)
    severity = _severity(share, IDLE_SHARE_MEDIUM, IDLE_SHARE_HIGH) or ("info" if share >= 0.05 else None)
    if severity is None:
        return None
    return Finding(
        "graph_replay_idle", severity,
        f"the GPU idles {_pct(share)} of the {_kind_phrase(s.kind)} step span inside CUDA/HIP graph replays — "
        "between the kernels of one replay (dependencies, event waits, graph node gaps), not launch- or host-bound: "
        "the CPU launched each graph at once",
        {"graph_idle_share_of_span": share, "graph_idle_us": s.graph_idle_us, "span_us": s.gpu_span_us,
         "graph_launches": s.graph_launches},
        rank, s.kind,
    )


def cast_overhead(s: KindSummary, rank: int | None) -> Finding | None:
    share = _share(s.classes_us.get("cast", 0.0), s.gpu_busy_us)
    severity = _severity(share, CAST_SHARE_MEDIUM, CAST_SHARE_HIGH)
    if severity is None:
        return None
    return Finding(
        "cast_overhead", severity,
        f"dtype casts and quantisation are {_pct(share)} of {_kind_phrase(s.kind)} GPU busy time",
        {"cast_share_of_busy": share, "cast_us": s.classes_us.get("cast", 0.0), "busy_us": s.gpu_busy_us},
        rank, s.kind, ("quantization",),
    )


def graph_mode(s: KindSummary, rank: int | None) -> Finding:
    """Eager or graph replay; a replayed kind says what its trace cannot give (the kernels' shapes and the per-op
    time of the kernels without a launching op) and how to capture one that can (docs/capture.md)."""
    no_op = s.unshaped_us.get("no_op", 0.0)
    if s.graph_launches:
        per_launch = s.kernels / s.graph_launches
        missing = (f"; {no_op / 1e3:,.2f} ms of kernels carry no launching op, so this trace cannot give their shapes "
                   "(FLOPs, bytes, % of peak), per-op time or kernel tuning headroom — give a capture trace "
                   "(servescope trace --capture FILE; vLLM --profiler-config.capture_torch_profiler, SGLang "
                   "--enable-profile-cuda-graph) or profile eagerly (docs/capture.md)") if no_op > 0 else ""
        message = (f"{_kind_phrase(s.kind)} steps replay CUDA/HIP graphs: {s.graph_launches} graph launches for {s.kernels} GPU "
                   f"events (~{per_launch:.0f} per launch); per-op attribution inside a graph is not in the trace"
                   f"{missing}")
    else:
        message = f"{_kind_phrase(s.kind)} steps run eagerly: {s.launches} launches for {s.kernels} GPU events"
    return Finding("graph_mode", "info", message,
                   {"graph_launches": s.graph_launches, "launches": s.launches, "gpu_events": s.kernels,
                    "no_op_us": no_op}, rank, s.kind)


def step_gaps(b: TraceBreakdown) -> Finding | None:
    """GPU idle between consecutive steps of a rank (the first GPU start of step n+1 minus the last GPU end of
    step n, clipped at 0 where steps overlap on the GPU), as the median over pairs against the median step cycle
    (gap + GPU span). This idle is invisible to the per-step idle of `launch_bound`: it is CPU work between steps —
    a serving engine's scheduling, input preparation and output processing when not overlapped, a training loop's
    data loading."""
    # idle-gap segments are cut at idle gaps by construction (steps.py): the gaps between them are not news
    pairs = gaps_after_steps_us([s for s in b.steps if s.source != "idle_gap"])
    if not pairs:
        return None
    gaps = [g for _, g in pairs]
    gap, cycle = median(gaps), median(g + p.gpu_span_us for p, g in pairs)
    share = _share(gap, cycle)
    severity = _severity(share, STEP_GAP_SHARE_MEDIUM, STEP_GAP_SHARE_HIGH) or (
        "low" if share >= STEP_GAP_SHARE_LOW else None)
    if severity is None:
        return None
    kinds = sorted({p.kind for p, _ in pairs})
    serving = any(k in ("prefill", "decode", "mixed") for k in kinds)
    cause = ("the engine's CPU work between steps (scheduling, input preparation, output processing) is not "
             "overlapped with the GPU" if serving else
             "work outside the profiled steps (in a training loop: data loading, logging, the optimizer's host side)")
    return Finding(
        "step_gap", severity,
        f"the GPU idles {gap / 1e3:.2f} ms between consecutive steps (median of {len(gaps)} gaps, "
        f"{_pct(share)} of the median step cycle of {cycle / 1e3:.2f} ms): {cause}",
        {"median_gap_us": gap, "median_cycle_us": cycle, "gap_share_of_cycle": share, "pairs": len(gaps),
         "max_gap_us": max(gaps), "step_kinds": ",".join(kinds)},
        b.rank, kinds[0] if len(kinds) == 1 else None, ("async_scheduling",) if serving else (),
    )


def findings_for_rank(b: TraceBreakdown) -> list[Finding]:
    out: list[Finding] = []
    for s in b.kinds:
        out += [f for f in (communication_bound(s, b.rank), launch_bound(s, b.rank), graph_replay_idle(s, b.rank),
                            cast_overhead(s, b.rank)) if f]
        out += low_occupancy(s, b.rank, b.num_sms)
        out.append(graph_mode(s, b.rank))
    gap = step_gaps(b)
    return out + ([gap] if gap else [])


def rank_skew(ranks: list[TraceBreakdown]) -> list[Finding]:
    """Compare ranks step by step: busy-time spread (a straggler) and communication-time spread (who waits)."""
    if len(ranks) < 2:
        return []
    n = min(len(r.steps) for r in ranks)
    if n == 0:
        return []
    busy = [sum(s.gpu_busy_us for s in r.steps[:n]) for r in ranks]
    comm = [sum(s.classes_us.get(COMMUNICATION, 0.0) for s in r.steps[:n]) for r in ranks]
    starts = [r.steps[0].gpu_start_us or 0.0 for r in ranks]
    spread = (max(busy) - min(busy)) / max(busy) if max(busy) > 0 else 0.0
    slow = ranks[busy.index(max(busy))].rank
    waits = ranks[comm.index(max(comm))].rank
    severity = "medium" if spread >= SKEW_SHARE_MEDIUM else "info"
    comm_spread = max(comm) - min(comm)
    # A rank that spends longer in collectives waited there for the others; below 1% of busy it is noise.
    who_waits = (f"rank {waits} spends longest in collectives, i.e. waits for the others"
                 if comm_spread > 0.01 * max(busy) else "no rank waits measurably longer in collectives")
    return [Finding(
        "rank_skew", severity,
        f"across {len(ranks)} ranks over {n} common step(s), summed GPU busy time differs by {_pct(spread)} of "
        f"the largest (max {_time(max(busy))} on rank {slow}, min {_time(min(busy))}); communication differs by "
        f"{_time(comm_spread)} — {who_waits}",
        {"ranks": len(ranks), "steps_compared": n, "busy_spread_share": spread, "busy_max_us": max(busy),
         "busy_min_us": min(busy), "slowest_rank": slow, "comm_max_us": max(comm), "comm_min_us": min(comm),
         "comm_spread_us": max(comm) - min(comm), "most_waiting_rank": waits,
         "first_step_start_skew_us": max(starts) - min(starts)},
    )]


def find_all(ranks: list[TraceBreakdown], extra: Sequence[Finding] = ()) -> list[Finding]:
    """Findings of every rank, then the cross-rank ones, then `extra`, highest severity first (stable within a
    severity)."""
    order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    out = [f for r in ranks for f in findings_for_rank(r)] + rank_skew(ranks) + list(extra)
    return sorted(out, key=lambda f: order[f.severity])
