"""The step model's roofline terms, one function each, efficiency-free (100 % of each ceiling; combine.py applies
the efficiencies). Every function returns the `StepParts` fields of its term; the docstring is its line of the
formula (the whole: step.py's module docstring). Notation, per point (numpy arrays, broadcast):
    B sequences in the step (all dp ranks), t tokens per sequence, L cached context tokens before the step,
    b = ⌈B/dp⌉ on the busiest attention-DP rank, T_rank = b·t, T_glob = B·t, T_pad = T_rank padded to the next
    captured CUDA-graph size (graphs.py; T_rank when eager), BW = achieved HBM bandwidth, BW_peak = datasheet.

What it does not: the measured per-op curves (step_curves.py), combine terms (combine.py), cache (step_model.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import hw
from servescope.perfmodel.dp_balance import attention_imbalance, context_cv, term_factor
from servescope.perfmodel.ep_balance import busiest_touched, moe_imbalance
from servescope.perfmodel.graphs import eager_host_s, eager_ops_per_step, padded_tokens
from servescope.perfmodel.measured_ops import ATTENTION_KERNELS_PER_LAYER
from servescope.perfmodel.moe_host import moe_routing_s
from servescope.perfmodel.ops import ACT_BYTES, Ops
from servescope.perfmodel.routing import placement_cv, routing_draws
from servescope.perfmodel.step_types import Arr, ArrayLike, CollParts

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment
    from servescope.perfmodel.step_model import StepModel

Fields = dict[str, Arr]  # StepParts fields of one term


@dataclass(frozen=True)
class StepShape:
    """A step's geometry, per point (arrays broadcast together; notation in the module docstring)."""

    prefill: bool
    b_all: Arr  # B
    t: Arr
    L: Arr
    b: Arr
    t_rank: Arr
    t_glob: Arr
    graphed: Arr  # 1.0 where the step replays a CUDA graph
    t_pad: Arr
    L_eff: Arr  # context tokens whose KV is read (the step's own included)
    L_q: Arr  # mean context a query sees (causal in the step)
    vp: Arr  # a verify block the engine's MLA backend runs on its prefill path (verify_as_prefill)
    imb: Arr | float  # the busiest attention-DP rank's context over the mean (dp_balance.py; 1 without DP)
    t_logits: Arr  # sampled tokens: every decode/verify token, a prefill chunk's last token per sequence
    t_logits_pad: Arr
    zero: Arr


def step_shape(sc: Deployment, batch: ArrayLike, ctx: ArrayLike, tokens_per_seq: ArrayLike,
               prefill: bool) -> StepShape:
    """b = ⌈B/dp⌉ (the busiest attention-DP rank sets the pace); L_eff = L + t (prefill) or L + t − 1 (decode,
    verify); L_q = L + (t + 1)/2 (prefill, causal) or L + (t − 1)/2; DP imbalance on decode steps only."""
    b_all, t, L = (np.asarray(x, dtype=float) for x in (batch, tokens_per_seq, ctx))
    b_all, t, L = np.broadcast_arrays(b_all, t, L)
    b = np.ceil(b_all / sc.dp - 1e-9)
    t_rank, t_glob = b * t, b_all * t
    graphed, t_pad = padded_tokens(sc.engine.graphs.capture_sizes, t_rank, sc.cuda_graphs and not prefill)
    L_eff = L + t if prefill else L + t - 1.0
    L_q = L + (t + 1.0) / 2.0 if prefill else L + (t - 1.0) / 2.0
    # a verify block that the engine's MLA backend runs through its prefill path (specs.engines): the cached
    # context is up-projected like a prefill chunk's, and the attention runs at prefill FLOPs, not the decode kernel
    vp = (t > 1.0) & verify_as_prefill(sc) if not prefill else np.zeros_like(t, dtype=bool)
    # the busiest attention-DP rank's decode sequences: their contexts spread, its mean above the mean (dp_balance.py)
    imb = attention_imbalance(sc.dp, b, context_cv(sc.isl, sc.osl, sc.decode_only)) if sc.dp > 1 and not prefill else 1.0
    return StepShape(prefill, b_all, t, L, b, t_rank, t_glob, graphed, t_pad, L_eff, L_q, vp, imb,
                     b if prefill else t_rank, b if prefill else t_pad, np.zeros_like(t_rank))


def verify_as_prefill(sc: Deployment) -> bool:
    """Whether the engine's default MLA backend on this GPU runs a speculative verify block through its MLA prefill
    path (specs/data/engines/vllm.toml speculative.mla_verify_as_prefill_on; vLLM's TRITON_MLA on sm_8x and sm_120)."""
    return (sc.model.attention_kind == "mla" and bool(sc.model.kv_lora_rank)
            and sc.gpu.compute_capability in sc.engine.speculative.mla_verify_as_prefill_on)


def weights_parts(o: Ops, s: StepShape) -> Fields:
    """Dense GEMMs: memory = dense weight bytes / BW; compute = T_pad · GEMM s/token at peak + padded sampled
    tokens · lm_head s/token at peak (attributed to `weights` or `compute`, whichever is larger)."""
    return {"mem_gemm_s": np.full_like(s.t_rank, o.gemm_weight_bytes / o.bw_bytes_per_s),
            "comp_gemm_s": s.t_pad * o.gemm_s_per_token_peak + s.t_logits_pad * o.lm_head_s_per_token_peak}


@dataclass(frozen=True)
class ExpertWork:
    bytes: Arr  # routed-expert bytes read by the busiest GPU (ep_balance)
    compute_s: Arr  # expert FLOPs at peak on the busiest expert-parallel rank


def expert_work(sc: Deployment, o: Ops, s: StepShape) -> ExpertWork:
    """Routed experts: bytes = MoE layers · experts touched on the busiest GPU (ep_balance) · expert bytes (a
    prefill chunk's tokens route as independent draws; a verify step's per sequence in part alike:
    routing.routing_draws); compute = T_pad · dp · expert s/token at peak · moe_imbalance(ep, T_glob · k, the
    skew's placement CV)."""
    nbytes = _moe_bytes(sc, o, s.t_glob if s.prefill else routing_draws(s.b_all, s.t))
    ep = sc.ep if o.n_moe_layers else 1
    skew_cv = placement_cv(sc.routing, sc.model.model_type, o.n_experts, o.top_k, ep, s.t_glob) if ep > 1 else 0.0
    comp = (s.t_pad * sc.dp) * o.expert_s_per_token_peak * moe_imbalance(ep, s.t_glob * o.top_k, skew_cv)
    return ExpertWork(nbytes, comp)


def expert_parts(o: Ops, x: ExpertWork) -> Fields:
    """Routed experts: memory = expert bytes / BW; compute as `expert_work` (`weights` or `compute`)."""
    return {"mem_moe_s": x.bytes / o.bw_bytes_per_s, "comp_moe_s": x.compute_s}


def _moe_bytes(sc: Deployment, o: Ops, t_glob: Arr) -> Arr:
    """Routed-expert bytes one step reads on the busiest GPU: MoE layers · distinct experts touched on the busiest
    of ep GPUs (ep_balance.busiest_touched; all K̄ touched at ep = 1, where every GPU reads a slice of each) · bytes
    of one expert's slice on a GPU (per_expert / moe_tp)."""
    if not o.n_moe_layers:
        return np.zeros_like(t_glob)
    busiest = busiest_touched(sc.routing, sc.model.model_type, o.n_experts, o.top_k, sc.ep, t_glob)
    return o.n_moe_layers * busiest * o.expert_bytes


@dataclass(frozen=True)
class AttentionWork:
    kv_read_bytes: Arr | float  # per sequence
    kv_bytes: Arr  # read by the rank's sequences + written by the step
    flops: Arr
    ctx_bytes: Arr  # MLA context up-projection: the k/v it writes and reads
    ctx_flops: Arr  # ... its kv_b_proj FLOPs


def attention_work(o: Ops, s: StepShape) -> AttentionWork:
    """Attention: KV bytes = b · Σ_terms bytes/token · tokens(L_eff) · f_dp + T_rank · KV write bytes/token;
    FLOPs = T_rank · Σ_terms FLOPs/token (prefill ones for a prefill or a prefill-path verify) · tokens(L_q) · f_dp;
    the MLA context up-projection (a prefill chunk, a prefill-path verify): b · L · its FLOPs and bytes per token."""
    kv_read = sum(ct.bytes_per_token * ct.tokens(s.L_eff) * term_factor(ct.kind, s.imb) for ct in o.ctx_terms)
    kv_bytes = s.b * kv_read + s.t_rank * o.kv_write_bytes_per_token
    fl = s.t_rank * sum((ct.flops_prefill if s.prefill else np.where(s.vp, ct.flops_prefill, ct.flops_decode))
                        * ct.tokens(s.L_q) * term_factor(ct.kind, s.imb) for ct in o.ctx_terms)
    up = np.where(s.vp, 1.0, 0.0) + (1.0 if s.prefill else 0.0)
    return AttentionWork(kv_read, kv_bytes, fl, up * s.b * s.L * o.mla_ctx_bytes_per_token,
                         up * s.b * s.L * o.mla_ctx_flops_per_token)


def attention_parts(o: Ops, a: AttentionWork) -> Fields:
    """Attention (`kv` or `compute`): memory = (KV bytes + MLA context bytes) / BW; compute = FLOPs / attention peak
    + MLA context FLOPs / kv_b_proj dtype peak (attention class, so the simulation's per-chunk attention tables
    carry it)."""
    return {"mem_attn_s": (a.kv_bytes + a.ctx_bytes) / o.bw_bytes_per_s,
            "comp_attn_s": a.flops / o.attn_peak_flops + a.ctx_flops / o.mla_ctx_peak_flops}


def indexer_work(o: Ops, s: StepShape) -> tuple[Arr, Arr]:
    """DeepSeek sparse-attention indexer of a step: (bytes, FLOPs) per GPU. Bytes = b · Σ (index_dim + 4) B per
    effective context token (fp8 keys + fp32 scale, read once per sequence); FLOPs = T_rank · Σ 2·ih·id per effective
    context token a query sees (every query token scores the whole context: q_len × context; ops.py)."""
    zero = np.zeros_like(s.t_rank)
    if not o.idx_terms:
        return zero, zero
    nbytes = s.b * sum(ct.bytes_per_token * ct.tokens(s.L_eff) for ct in o.idx_terms)
    fl = s.t_rank * sum((ct.flops_prefill if s.prefill else ct.flops_decode) * ct.tokens(s.L_q) for ct in o.idx_terms)
    return nbytes + zero, fl + zero


def recurrent_work(o: Ops, s: StepShape) -> tuple[Arr, Arr]:
    """Linear-attention / Mamba layers of a step: (bytes, FLOPs) per GPU. Bytes = b · state read + written (fp32)
    + in prefill T_rank · the chunk states the scan writes and reads; FLOPs = T_rank · per-token recurrence (decode,
    verify) or chunked-scan FLOPs (prefill). Formulas in mixers.py."""
    r = o.rec
    if not r.state_bytes_per_seq:
        zero = np.zeros_like(s.t_rank)
        return zero, zero
    nbytes = s.b * r.state_bytes_per_seq + (s.t_rank * r.bytes_prefill_per_token if s.prefill else 0.0)
    return nbytes, s.t_rank * (r.flops_prefill_per_token if s.prefill else r.flops_decode_per_token)


def mixer_parts(o: Ops, s: StepShape, idx: tuple[Arr, Arr], rec: tuple[Arr, Arr]) -> Fields:
    """`indexer` and `recurrent`: memory = bytes / BW, compute = FLOPs / peak (fp8 for the indexer's logits,
    the attention peak for the recurrence)."""
    bw = o.bw_bytes_per_s
    return {"mem_idx_s": idx[0] / bw + s.zero, "comp_idx_s": idx[1] / o.idx_peak_flops,
            "mem_rec_s": rec[0] / bw + s.zero, "comp_rec_s": rec[1] / o.attn_peak_flops}


def collectives(mdl: StepModel, s: StepShape) -> dict[str, CollParts]:
    """communication = Σ collectives calls · (latency + bandwidth part) on the measured curves, messages of
    T_rank · hidden (all-reduce, send/recv), T_rank · k · hidden (all-to-all), T_glob · hidden (all-gather and
    reduce-scatter of the MoE dispatch), sampled tokens · vocab/tp (logits gather), activations in ACT_BYTES."""
    sc, o = mdl.sc, mdl.ops
    h = o.hidden
    out: dict[str, CollParts] = {}
    for name, timer in mdl.timers.items():
        if name == hw.ALL_REDUCE:
            calls, msg = o.ar_per_step, s.t_rank * h * ACT_BYTES
        elif name == hw.ALL_GATHER + ":logits":
            calls, msg = 1, s.t_logits * (o.vocab / sc.tp) * ACT_BYTES
        elif name == hw.ALL_TO_ALL:
            calls, msg = 2 * o.moe_a2a_layers, s.t_rank * o.top_k * h * ACT_BYTES
        elif name in (hw.ALL_GATHER, hw.REDUCE_SCATTER):
            calls, msg = o.moe_a2a_layers, s.t_glob * h * ACT_BYTES
        else:  # send_recv between PP stages
            calls, msg = sc.pp - 1, s.t_rank * h * ACT_BYTES
        lat, bw_part = timer.parts_s(msg)
        out[name] = CollParts(calls, msg, calls * lat, calls * bw_part)
    return out


def collective_parts(colls: dict[str, CollParts], s: StepShape) -> Fields:
    """The collectives' summed latency and bandwidth parts (combine.py scales each by its fitted factor)."""
    return {"coll_latency_s": sum((c.latency_s for c in colls.values()), s.zero),
            "coll_bandwidth_s": sum((c.bandwidth_s for c in colls.values()), s.zero)}


def floor_s(o: Ops, s: StepShape, x: ExpertWork, a: AttentionWork, idx: tuple[Arr, Arr], rec: tuple[Arr, Arr],
            coll: Fields) -> Arr:
    """floor = max(all bytes / BW_peak, all FLOPs / peak, unpadded) + collectives on the measured curves: no
    efficiency losses, no launch/CPU overhead."""
    mem_peak = (o.gemm_weight_bytes + x.bytes + a.kv_bytes + a.ctx_bytes + idx[0] + rec[0]) / o.peak_bw_bytes_per_s
    fl_peak = (s.t_rank * o.gemm_s_per_token_peak + s.t_logits * o.lm_head_s_per_token_peak
               + s.t_glob * o.expert_s_per_token_peak + a.flops / o.attn_peak_flops
               + a.ctx_flops / o.mla_ctx_peak_flops + idx[1] / o.idx_peak_flops + rec[1] / o.attn_peak_flops)
    floor: Arr = np.maximum(mem_peak, fl_peak) + coll["coll_latency_s"] + coll["coll_bandwidth_s"]
    return floor


# Kernels per MLA layer that a verify block on the MLA prefill path launches outside the CUDA graph: vLLM splits its
# piecewise graphs at the attention op, and Triton MLA cannot capture multi-token blocks (it declares
# UNIFORM_SINGLE_TOKEN_DECODE: FULL -> PIECEWISE under speculative decoding, vllm#44492). Counted from the path's
# ops (approximate): the attention kernels of a layer (ATTENTION_KERNELS_PER_LAYER, measured) + the W_UK and W_UV
# batched GEMMs + the kv_b_proj up-projection of the cached context + the merge of the context and new-token states.
MLA_PREFILL_PATH_KERNELS_PER_LAYER = ATTENTION_KERNELS_PER_LAYER + 4.0


def attention_layers(sc: Deployment) -> int:
    """Layers whose mixer is full or sliding-window attention (the per-layer attention kernels)."""
    return sum(1 for a in sc.model.layer_attention if a in ("full", "sliding"))


def overhead_parts(sc: Deployment, o: Ops, s: StepShape) -> Fields:
    """overhead's inputs: kernels per step (each kernel_overhead_s in a graph replay, launch_overhead_s eager),
    graphed, whether the engine overlaps CPU scheduling, the prefill-path verify's eagerly launched kernels
    (attention layers · MLA_PREFILL_PATH_KERNELS_PER_LAYER), the host dispatch of an eager decode step (graphs.py
    eager_host_s: its kernels + collective calls, each one host op) and the MoE routing kernels of a graphed step
    (moe_host.py)."""
    # the ops are counted only for a deployment run without graphs (eager_host_s is 0 for the others)
    n_ops = 0.0 if sc.cuda_graphs else (eager_ops_per_step(sc, o.kernels_per_step)[0] + o.ar_per_step
                                         + 2 * o.moe_a2a_layers + (1 if sc.tp > 1 else 0) + (sc.pp - 1))
    host = eager_host_s(n_ops, s.graphed, s.prefill, sc.cuda_graphs)
    return {"kernels": np.full_like(s.t_rank, float(o.kernels_per_step)), "graphed": s.graphed,
            "host_dispatch_s": host + s.zero,
            "overlap": np.full_like(s.t_rank, 1.0 if sc.overlaps_cpu else 0.0),
            "eager_kernels": np.where(s.vp, attention_layers(sc) * MLA_PREFILL_PATH_KERNELS_PER_LAYER, 0.0) + s.zero,
            "routing_s": moe_routing_s(o.n_moe_layers, sc.gpu.vendor, s.graphed) + s.zero}
