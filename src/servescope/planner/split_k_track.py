"""The `split_k_attention` track: what splitting the attention kernel's KV loop across more CTAs pays — or costs.

Does, in order:
  sparse decode  when the trace's per-kernel numbers (or a ledger row's kernel) name a sparse-attention decode kernel
                 (specs.decode_kernels: the DSA / sparse-MLA kernels of DeepSeek-V3.2/V4 and GLM-5): its grid from
                 the deployment (tokens in the step × ⌈heads per rank / head tile⌉, or the trace's blocks per SM ×
                 SMs), its per-CTA work from the model (top-k, and the sliding window for DeepSeek-V4's two
                 segments), its measured µs per call, and perfmodel.split_k's model: the best S ≥ 2, its predicted
                 µs per call (the split kernel's own fixed time κ, the straggler CTA's tiles, the fixed streaming, the
                 combine with its κ) — below 1× where the grid already fills the SMs or the per-CTA work is short. details: `split_k`, `split_k_ratio` (new / old
                 time per call: pair_check prices kernel_us rows with it), `split_k_us`, `split_k_tried_us`, and
                 `split_k_off_better` when no split pays. End to end: the decode step's attention loses (or gains)
                 the kernel's saved µs as a share of the measured attention time (a KernelTuning adjustment).
  occupancy      otherwise, when the calibrated attention kernels run below one block per SM: split-K /
                 flash-decoding fills every SM: achieved bandwidth ≈ min(1, blocks per SM) of a full-occupancy
                 kernel, so the fitted attention efficiency is divided by that fraction (capped at the full-occupancy
                 default).
Does not: read a trace (advise builds the per-kernel numbers), or know kernels outside specs.decode_kernels.
"""

from __future__ import annotations

import math

from servescope.calibrate import knob_value
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.split_k import SplitChoice, sparse_decode_model
from servescope.planner.kernels import KernelRow
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.tracks_kernels import KernelTuning
from servescope.planner.whatif import Change, WhatIf
from servescope.specs.decode_kernels import DecodeKernel, shape_for

KIND = "split_k_attention"


def split_k_attention_track(ctx: Context) -> Proposal:
    validate = ("switch the attention backend to one that splits the KV sequence (VLLM_ATTENTION_BACKEND="
                "FLASHINFER or FLASH_ATTN with num_splits>1); in a trace the attention kernel's blocks per SM "
                "should reach ≥1 and its time fall")
    sparse = _sparse_rows(ctx)
    if sparse:
        return _sparse_track(ctx, sparse[0][0], sparse[0][1])
    return _occupancy_track(ctx, validate)


def _sparse_rows(ctx: Context) -> list[tuple[KernelRow, DecodeKernel]]:
    """The decode kernels of the per-kernel numbers that specs.decode_kernels knows, longest first."""
    ev = ctx.kernels
    if ev is None:
        return []
    rows = [(r, k) for r in ev.rows if r.kind == "decode" and (k := shape_for(r.name)) is not None]
    return sorted(rows, key=lambda rk: -rk[0].measured_us)


def sparse_choice(sc: Scenario, row: KernelRow, shape: DecodeKernel, tokens: int) -> tuple[SplitChoice, int, int]:
    """The split-K model of one sparse decode kernel on `sc` with `tokens` decode tokens per step: (the choice over
    S ≥ 2, CTAs, heads per rank). The bandwidth is the GPU's datasheet (a CTA streams at its SM's share)."""
    gpu, model = sc.gpu, sc.model
    heads = max(1, math.ceil(model.n_heads / max(int(sc.tp), 1)))
    ctas = round(row.blocks_per_sm * gpu.sm_count) if row.blocks_per_sm else tokens * math.ceil(heads / shape.head_block)
    topk = model.index_topk or shape.segments[-1]
    segments = ((model.sliding_window or shape.segments[0], topk) if len(shape.segments) == 2 else (topk,))
    call_s = row.measured_us / max(row.calls, 1) * 1e-6
    k = sparse_decode_model(shape, max(ctas, 1), gpu.sm_count, call_s, heads, gpu.hbm_bw_bytes_per_s, segments)
    best = k.best()
    tried = {s: t for s, t in best.tried.items() if s >= 2} or {2: k.time_s(2)}
    s = min(tried, key=lambda x: (tried[x], x))
    return SplitChoice(s, tried[s], call_s, k.reduce_s(s), k.waves(s), best.tried), max(ctas, 1), heads


def _sparse_track(ctx: Context, row: KernelRow, shape: DecodeKernel) -> Proposal:
    sc = ctx.scenario
    choice, ctas, heads = sparse_choice(sc, row, shape, ctx.concurrency)
    off_better = choice.tried[1] <= choice.time_s
    per_call = row.measured_us / max(row.calls, 1)
    validate = (f"{shape.label}: a trace with the engine's split-K decode path (vLLM: VLLM_SPARSE_MLA_SPLITK=<S> on "
                f"SM12x, the ROCm DSV4 split path) — the kernel should fall from {per_call:,.1f} to ≈"
                f"{choice.time_s * 1e6:,.1f} µs per call plus its combine kernel")
    kt = ctx.kernels.kind(row.kind) if ctx.kernels is not None else None
    attn_us = (kt.class_us.get("attention", 0.0) if kt is not None else 0.0) or row.measured_us
    saved_share = (1.0 - choice.ratio) * min(1.0, row.measured_us / attn_us)
    whatif = WhatIf(KIND, adjust=KernelTuning(((row.kind, "attention", saved_share),)))
    collapse = f"{ctas} CTAs on {sc.gpu.sm_count} SMs ({heads} heads per rank, {ctx.concurrency} decode tokens)"
    tried = ", ".join(f"S={s}: {t * 1e6:,.1f}" for s, t in choice.tried.items())
    note = (f"{collapse}: split-K S={choice.splits} → {choice.time_s * 1e6:,.1f} µs per call from {per_call:,.1f} "
            f"({choice.gain:.2f}×, combine {choice.reduce_s * 1e6:.1f} µs); µs per call by S: {tried}")
    details = {"split_k": choice.splits, "split_k_ratio": choice.ratio, "split_k_us": choice.time_s * 1e6,
               "split_k_tried_us": {s: t * 1e6 for s, t in choice.tried.items()}, "split_k_ctas": ctas,
               "split_k_off_better": off_better, "kernel": row.name}
    why = (f"does not pay: {collapse} already spread the work — every split adds waves or a combine that costs more "
           f"than the tiles it spreads ({choice.gain:.2f}× at S={choice.splits})" if off_better else None)
    pre = (f"the engine has a split-K path for {row.name[:60]} (source of the kernel's shape: {shape.source})",)
    return Proposal(KIND, True, why, "engine upgrade", pre, validate, whatif=whatif, note=note, details=details)


def _occupancy_track(ctx: Context, validate: str) -> Proposal:
    cal = ctx.calibration
    blocks = cal.attention_blocks_per_sm if cal is not None else None
    low = _low_occupancy_attention(ctx)
    if low:  # the trace's per-kernel numbers (the kernel_tuning track's): the same weighting, and the kernels' names
        blocks = sum((r.blocks_per_sm or 0.0) * r.measured_us for r in low) / sum(r.measured_us for r in low)
        validate += "; " + "; ".join(
            f"{r.name[:50]}: now {r.measured_us / max(r.calls, 1):,.1f} µs per call at {r.blocks_per_sm:.2f} blocks "
            "per SM" for r in low[:2])
    knob = cal.knobs.get("attention") if cal is not None else None
    if cal is None or blocks is None or knob is None:
        return not_applicable(KIND, "needs a trace: the model assumes attention already reaches full-occupancy "
                              "efficiency; calibrate on a trace to see blocks per SM", "engine upgrade", validate)
    if blocks >= 1.0:
        return not_applicable(KIND, f"attention already fills the GPU ({blocks:.2f} blocks per SM in the trace)",
                              "engine upgrade", validate)
    from servescope.perfmodel import default_efficiency

    sc = ctx.scenario
    full = knob_value(default_efficiency(str(sc.gpu.generation), sc.backend), knob)
    fitted = knob_value(sc.efficiency, knob)
    # an SM without a block pulls nothing: achieved ≈ min(1, blocks per SM) of a full-occupancy kernel, so
    # filling every SM divides the attention time by that fraction (capped at the full-occupancy default)
    target = min(full, fitted / max(occupancy(blocks), 1e-3))
    if target <= fitted * 1.01:
        return not_applicable(KIND, f"attention runs at {blocks:.2f} blocks per SM but already reaches the "
                              f"full-occupancy efficiency ({knob} {fitted:.2f})", "engine upgrade", validate)

    change = Change.of(efficiency={knob: target})
    pre = (f"the trace's attention kernels run {blocks:.2f} blocks per SM (< 1): most SMs idle",)
    note = (f"achieved attention bandwidth ≈{occupancy(blocks):.0%} of a full-occupancy kernel; "
            f"{knob} {fitted:.3f} → {target:.3f}")
    return Proposal(KIND, True, None, "engine upgrade", pre, validate, whatif=WhatIf(KIND, scenario=change),
                    note=note, details={"blocks_per_sm": blocks, "knob": knob})


def _low_occupancy_attention(ctx: Context) -> list[KernelRow]:
    """The traced attention kernels (per-kernel numbers of the calibrated step kinds) with blocks per SM known,
    longest first; [] without per-kernel numbers."""
    ev = ctx.kernels
    if ev is None:
        return []
    kinds = {s.kind for s in ctx.calibration.steps} if ctx.calibration is not None else None
    rows = [r for r in ev.rows if r.kernel_class == "attention" and r.blocks_per_sm is not None
            and (kinds is None or r.kind in kinds)]
    return sorted(rows, key=lambda r: -r.measured_us)


def occupancy(blocks_per_sm: float) -> float:
    """Fraction of full-occupancy bandwidth a kernel reaches with `blocks_per_sm` blocks per SM: min(1, b)
    (planner assumption: SMs without a block pull nothing; one block per SM reaches its share)."""
    return min(1.0, max(0.0, blocks_per_sm))
