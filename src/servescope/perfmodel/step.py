"""One engine step (decode, speculative verify, or a prefill chunk): its terms, dominant term and floor.

Two stages, so a fit can re-evaluate many efficiencies on fixed scenarios without rebuilding anything:
`step_parts` (efficiency-free times at 100 % of each measured ceiling, numpy arrays) and `combine_step`
(efficiencies applied). `step_arrays` = both; `decode_step` / `prefill_step` wrap it for one point.

Combination (docs/model.md §Terms). Per kernel class c ∈ {gemm, moe, attention} the time is a roofline
    t_c = max(memory_c / (BW_achieved · bw_eff_c), flops_c / (peak_c · compute_eff_c))
with BW_achieved = datasheet BW × the GPU's measured/sourced `hbm_bw_efficiency` (specs/data/gpus), and is
attributed whole to one term: `weights` (gemm/moe memory-bound), `kv` (attention memory-bound) or `compute`.
Dense GEMMs on a GPU with a measured GEMM curve (gemm_curve.py, data/gemm_efficiency.toml; own or transferred from
its family) are priced as measured instead, with no fitted efficiency on top (`Efficiency.gemm_curve` = 1):
    t_gemm = max(weight bytes / datasheet BW, FLOPs / peak) · ratio(M),  M = padded tokens per rank in the step
Where aiconfigurator's per-op curves cover the GPU and engine (Efficiency.op_curves, measured_ops.py, combine.py):
    t_gemm = Σ_listed GEMMs count · max(curve(M), N·K·bytes / datasheet BW) + the unlisted rest's roofline
    t_attn = max(Σ_layers curve(b, L) ≥ KV read / datasheet BW, + KV writes / achieved BW; FLOPs / peak)   (decode)
and the curve-priced kernels leave the per-kernel overhead in a graph replay.
Two mixers run their own kernels and are their own terms, each a roofline with the attention efficiencies:
`indexer` (DeepSeek sparse-attention indexer: fp8 keys read, q·k logits at the fp8 peak; ops.py) and `recurrent`
(linear-attention / Mamba state read+write, recurrence or chunked scan; mixers.py).
    step = weights + kv + compute + communication + overhead + indexer + recurrent    (no overlap: exact sum)
    communication = Σ collectives calls · (latency·lat_scale + bandwidth part / bw_scale) on the measured curves
    overhead      = kernels · (kernel_overhead_s in a CUDA graph | launch_overhead_s eager/prefill) + routing + cpu,
                    routing = graphed · MoE layers · routing kernels per layer · their measured duration
                    (moe_host.py; 0 for a dense model, an eager step, or where a measured MoE curve prices the layer),
                    cpu = cpu_overhead_s + cpu_overhead_per_seq_s · batch, or on an engine that overlaps
                    scheduling with execution f·cpu + max((1 − f)·cpu − the GPU terms, 0), f = overlap_exposed_frac
                    (the share the overlap cannot hide, fitted) (Scenario.overlaps_cpu: TRT-LLM's
                    default, or vLLM with --async-scheduling)
Routed experts read per GPU: the distinct experts the step's tokens touch under skewed (power-law) loads, 1/ep of
them on each GPU (routing.py; uniform routing E/ep · (1 − (1 − k/E)^T) with --routing uniform). Expert compute is set by the busiest expert-parallel rank: the mean load times the expected maximum of ep rank
loads, from the sampling noise of B·k routed tokens and the skewed loads' placement variance (`moe_imbalance`). A decode batch inside the
engine's CUDA-graph capture range runs padded to the next captured size (GEMM/expert compute of the padded rows;
graphs.py); beyond it the step runs eagerly.
Multi-token queries (t tokens per sequence: speculative verify, prefill chunks): KV read once per sequence over
L + t − 1 (decode) or L + t (prefill) tokens; attention FLOPs t × the mean context a query sees, L + (t − 1)/2
(verify) or L + (t + 1)/2 (prefill, causal). A prefill chunk on an MLA model with L cached tokens also pays the
context up-projection (kv_b_proj GEMM over L, its k/v written and read; mixers.py), in the attention class; so does
a verify block where the engine's MLA backend runs it on its prefill path (`verify_as_prefill`: vLLM's Triton MLA,
specs/data/engines/), with prefill attention FLOPs and the attention block's kernels launched eagerly.
MoE dispatch under attention-DP + EP follows the engine default (`dispatch_mode`): all-to-all (TRT-LLM) or
all-gather + reduce-scatter (vLLM, SGLang).
`floor_s` = max(all bytes / datasheet BW, all FLOPs / peak FLOP/s) + collectives on the measured curves (no
efficiency losses, no launch/CPU overhead): what the hardware could do at best for this step.
What it does not: serving dynamics (serving.py) or memory capacity (memory.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel import hw
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.dp_balance import attention_imbalance, context_cv, term_factor
from servescope.perfmodel.gemm_curve import curve_for
from servescope.perfmodel.gemm_shapes import dense_gemms
from servescope.perfmodel.graphs import padded_tokens
from servescope.perfmodel.measured_ops import (
    ATTENTION_KERNELS_PER_LAYER,
    MAX_CURVE_OVER_ROOFLINE,
    MOE_KERNELS_PER_LAYER,
    PROBE_TOKENS,
    curve_over_roofline,
    decode_attention_curve,
    dense_gemm_curve,
    moe_layer_s,
    prefill_attention_curve,
)
from servescope.perfmodel.moe_host import moe_routing_s
from servescope.perfmodel.ops import ACT_BYTES, Ops, build_ops, peak_flops
from servescope.perfmodel.routing import placement_cv, routing_draws, touched_experts
from servescope.perfmodel.step_types import (
    TERMS,
    Arr,
    ArrayLike,
    CollectiveCost,
    CollParts,
    StepParts,
    StepPrediction,
    map_parts,
    stack_parts,
)

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

__all__ = ["TERMS", "CollParts", "CollectiveCost", "StepParts", "StepPrediction", "collective_costs", "combine_step",
           "decode_step", "dispatch_mode", "map_parts", "measured_attention", "model_for", "moe_curve_over_roofline",
           "moe_imbalance", "per_scenario", "prefill_step", "public_name", "stack_parts", "step_arrays", "step_parts"]

class _Model:
    """Ops and collective timers of one scenario, built once. They do not depend on the efficiencies, so the
    cache key leaves them out (fitting re-evaluates many efficiencies on the same scenarios)."""

    def __init__(self, sc: Deployment):
        self.sc, self.ops, self.gemms = sc, build_ops(sc), dense_gemms(sc)
        self.memo: dict[tuple[object, ...], object] = {}  # per_scenario: what else depends on version/routing/switches
        self.timers: dict[str, hw.CollectiveTimer] = {}
        for name, n in self._groups().items():
            curves = hw.load_curves(sc.gpu, n, sc.interconnect)
            self.timers[name] = hw.CollectiveTimer(curves, name.split(":")[0], n)

    def _groups(self) -> dict[str, int]:
        sc, o = self.sc, self.ops
        g: dict[str, int] = {}
        if sc.tp > 1:
            g[hw.ALL_REDUCE] = sc.tp
            g[hw.ALL_GATHER + ":logits"] = sc.tp
        if o.moe_a2a_layers:
            if sc.ep > 1 and dispatch_mode(sc.backend) == hw.ALL_TO_ALL:
                g[hw.ALL_TO_ALL] = sc.ep
            else:
                g[hw.ALL_GATHER] = sc.tp * sc.dp
                g[hw.REDUCE_SCATTER] = sc.tp * sc.dp
        if sc.pp > 1:
            g[hw.SEND_RECV] = 2
        return g


# How each engine's default moves tokens to and from the experts under attention-DP + expert parallelism (dp > 1,
# ep > 1). vLLM 0.19: ParallelConfig.all2all_backend = "allgather_reducescatter" (vllm/config/parallel.py L160);
# SGLang 0.5.9: moe_a2a_backend = "none" (server_args.py L495), DP attention gathers the tokens of all DP ranks and
# reduce-scatters the MoE output (srt/layers/dp_attention.py dp_gather_*, dp_reduce_scatter_tensor). TRT-LLM:
# all-to-all dispatch/combine (UNVERIFIED: no TensorRT-LLM source was read here; the model's earlier choice kept).
# DeepEP low-latency / normal modes are opt-in in both open engines and no measured DeepEP curve is bundled.
_DISPATCH = {"vllm": "all_gather_reduce_scatter", "sglang": "all_gather_reduce_scatter", "trtllm": hw.ALL_TO_ALL}


def dispatch_mode(backend: str) -> str:
    """The MoE dispatch/combine path of an engine's default under attention-DP + EP (see _DISPATCH)."""
    return _DISPATCH.get(backend, hw.ALL_TO_ALL)


_CacheKey = tuple[int, int, object, int, int, int, int, str | None, str]
_CACHE: dict[_CacheKey, tuple[Deployment, _Model]] = {}


def _key(sc: Deployment) -> _CacheKey:
    return (id(sc.model), id(sc.gpu), sc.quant, sc.tp, sc.ep, sc.pp, sc.dp, sc.interconnect, sc.backend)


def model_for(sc: Deployment) -> _Model:
    """The cached ops and collective timers of a scenario (loads the collective curves on first use)."""
    key = _key(sc)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].model is sc.model and hit[0].gpu is sc.gpu:
        return hit[1]
    if len(_CACHE) > 4096:
        _CACHE.clear()
    m = _Model(sc)
    _CACHE[key] = (sc, m)  # keeps the objects alive so their ids stay unique
    return m


def _coll_parts(mdl: _Model, t_rank: Arr, t_glob: Arr, t_logits: Arr) -> dict[str, CollParts]:
    """Collectives of one step with t_rank tokens per attention rank, t_logits of them sampled (message sizes
    per docs/model.md)."""
    sc, o = mdl.sc, mdl.ops
    h = o.hidden
    out: dict[str, CollParts] = {}
    for name, timer in mdl.timers.items():
        if name == hw.ALL_REDUCE:
            calls, msg = o.ar_per_step, t_rank * h * ACT_BYTES
        elif name == hw.ALL_GATHER + ":logits":
            calls, msg = 1, t_logits * (o.vocab / sc.tp) * ACT_BYTES
        elif name == hw.ALL_TO_ALL:
            calls, msg = 2 * o.moe_a2a_layers, t_rank * o.top_k * h * ACT_BYTES
        elif name in (hw.ALL_GATHER, hw.REDUCE_SCATTER):
            calls, msg = o.moe_a2a_layers, t_glob * h * ACT_BYTES
        else:  # send_recv between PP stages
            calls, msg = sc.pp - 1, t_rank * h * ACT_BYTES
        lat, bw_part = timer.parts_s(msg)
        out[name] = CollParts(calls, msg, calls * lat, calls * bw_part)
    return out


def moe_imbalance(ep: int, routed: Arr, placement_cv: Arr | float = 0.0) -> Arr:
    """Busiest expert-parallel rank's routed-token load over the mean load: 1 + sqrt(2·ln(ep)·(1 − 1/ep)) · CV, the
    normal-tail expectation of the maximum of ep rank loads (balls-in-bins; Raab & Steger 1998), CV² = the sampling
    noise of `routed` = B·k assignments (ep/n) + the skew's placement variance (routing.placement_cv²), capped at ep
    (all on one rank). 1 for ep = 1 (every GPU holds a slice of every expert)."""
    n = np.maximum(np.asarray(routed, dtype=float), 1.0)
    if ep <= 1:
        return np.ones_like(n)
    cv = np.sqrt(ep / n + np.asarray(placement_cv, dtype=float) ** 2)
    f = 1.0 + np.sqrt(2.0 * np.log(ep) * (1.0 - 1.0 / ep)) * cv
    return np.asarray(np.minimum(f, float(ep)))


def _moe_bytes(sc: Deployment, o: Ops, t_glob: Arr) -> Arr:
    """Routed-expert bytes one step reads per GPU: MoE layers · distinct experts touched on this GPU (routing.py,
    skewed loads by default) · bytes of one expert's slice."""
    if not o.n_moe_layers:
        return np.zeros_like(t_glob)
    touched = touched_experts(sc.routing, sc.model.model_type, o.n_experts, o.top_k, t_glob)
    return o.n_moe_layers * touched * (o.experts_per_gpu / o.n_experts) * o.expert_bytes


def step_parts(sc: Deployment, batch: ArrayLike, ctx: ArrayLike, tokens_per_seq: ArrayLike,
               prefill: bool = False) -> StepParts:
    """Efficiency-free parts of a step: numpy arrays (broadcast) of batch (sequences, all dp ranks), context
    length and tokens per sequence. For prefill, ctx is the context before the chunk."""
    mdl = model_for(sc)
    o = mdl.ops
    b_all, t, L = (np.asarray(x, dtype=float) for x in (batch, tokens_per_seq, ctx))
    b_all, t, L = np.broadcast_arrays(b_all, t, L)
    b = np.ceil(b_all / sc.dp - 1e-9)  # the busiest attention-DP rank sets the pace
    t_rank, t_glob = b * t, b_all * t
    graphed, t_pad = padded_tokens(sc.engine.graphs.capture_sizes, t_rank, sc.cuda_graphs and not prefill)
    bw = o.bw_bytes_per_s
    # distinct experts: a prefill chunk's tokens route as independent draws; a verify step's per sequence in part alike
    moe_bytes = _moe_bytes(sc, o, t_glob if prefill else routing_draws(b_all, t))
    ep = sc.ep if o.n_moe_layers else 1
    skew_cv = placement_cv(sc.routing, sc.model.model_type, o.n_experts, o.top_k, ep, t_glob) if ep > 1 else 0.0
    comp_moe = (t_pad * sc.dp) * o.expert_s_per_token_peak * moe_imbalance(ep, t_glob * o.top_k, skew_cv)
    L_eff = L + t if prefill else L + t - 1.0  # context tokens whose KV is read (the step's own included)
    L_q = L + (t + 1.0) / 2.0 if prefill else L + (t - 1.0) / 2.0  # mean context a query sees (causal in the step)
    # a verify block that the engine's MLA backend runs through its prefill path (specs.engines): the cached
    # context is up-projected like a prefill chunk's, and the attention runs at prefill FLOPs, not the decode kernel
    vp = (t > 1.0) & verify_as_prefill(sc) if not prefill else np.zeros_like(t, dtype=bool)
    # the busiest attention-DP rank's decode sequences: their contexts spread, its mean above the mean (dp_balance.py)
    imb = attention_imbalance(sc.dp, b, context_cv(sc.isl, sc.osl, sc.decode_only)) if sc.dp > 1 and not prefill else 1.0
    kv_read_bytes = sum(ct.bytes_per_token * ct.tokens(L_eff) * term_factor(ct.kind, imb) for ct in o.ctx_terms)  # per sequence
    kv_bytes = b * kv_read_bytes + t_rank * o.kv_write_bytes_per_token
    attn_fl = t_rank * sum((ct.flops_prefill if prefill else np.where(vp, ct.flops_prefill, ct.flops_decode))
                           * ct.tokens(L_q) * term_factor(ct.kind, imb) for ct in o.ctx_terms)
    idx_bytes, idx_fl = _indexer(o, b, t_rank, L_eff, L_q, prefill)
    rec_bytes, rec_fl = _recurrent(o, b, t_rank, prefill)
    up = np.where(vp, 1.0, 0.0) + (1.0 if prefill else 0.0)  # the MLA context up-projection: prefill chunks, vp
    ctx_fl, ctx_bytes = up * b * L * o.mla_ctx_flops_per_token, up * b * L * o.mla_ctx_bytes_per_token
    t_logits = b if prefill else t_rank  # sampled tokens: a prefill chunk's last token per sequence
    t_logits_pad = b if prefill else t_pad
    colls = _coll_parts(mdl, t_rank, t_glob, t_logits)
    mem_peak = (o.gemm_weight_bytes + moe_bytes + kv_bytes + ctx_bytes + idx_bytes + rec_bytes) / o.peak_bw_bytes_per_s
    fl_peak = (t_rank * o.gemm_s_per_token_peak + t_logits * o.lm_head_s_per_token_peak + t_glob * o.expert_s_per_token_peak + attn_fl / o.attn_peak_flops
               + ctx_fl / o.mla_ctx_peak_flops + idx_fl / o.idx_peak_flops + rec_fl / o.attn_peak_flops)
    zero = np.zeros_like(t_rank)
    c_lat = sum((c.latency_s for c in colls.values()), zero)
    c_bw = sum((c.bandwidth_s for c in colls.values()), zero)
    floor = np.maximum(mem_peak, fl_peak) + c_lat + c_bw
    curve = curve_for(sc.gpu)
    r_comp = curve.ratio(t_pad) if curve is not None else zero
    # the curve at the step's routing draws (verified tokens of a sequence partly alike), padded rows included
    draws = t_glob if prefill else routing_draws(b_all, t) * t_pad / np.maximum(t_rank, 1e-9)
    serving_moe = o.n_moe_layers and moe_curve_over_roofline(sc) <= MAX_CURVE_OVER_ROOFLINE  # nan: no curve
    moe_layer = moe_layer_s(sc, draws) if serving_moe else None
    # a curve measured on one layer's experts reused call after call can run L2-resident, faster than HBM allows; a
    # served step reads each layer's own experts: never below their read at the datasheet bandwidth
    moe_curve = (np.maximum(o.n_moe_layers * moe_layer, moe_bytes / o.peak_bw_bytes_per_s) + zero
                 if moe_layer is not None else zero)
    moe_kernels = zero + (o.n_moe_layers * MOE_KERNELS_PER_LAYER if moe_layer is not None else 0.0)
    dense = dense_gemm_curve(sc, mdl.gemms, t_pad, t_logits_pad, o.peak_bw_bytes_per_s)
    cov_bytes = sum(g.count * g.params * g.weights.bytes_per_param for g in dense.covered)
    cov_tok = sum(g.count * 2.0 * g.params / peak_flops(sc.gpu, g.weights.gemm_dtype)
                  for g in dense.covered if not g.sampled_only)
    cov_head = any(g.sampled_only for g in dense.covered)
    if prefill:  # a prompt with no cached prefix (the curve has none): the first chunk, or a whole prefill
        pf = prefill_attention_curve(sc, b, t)
        attn_op = None if pf is None else np.where(L <= 0.0, pf, 0.0)
    else:
        attn_op = decode_attention_curve(sc, b, L_eff)
    attn_op = np.where(vp, 0.0, attn_op * imb) if attn_op is not None else None  # busiest DP rank (dp_balance.py)
    attn_layers = sum(1 for a in sc.model.layer_attention if a in ("full", "sliding"))
    return StepParts(
        mem_gemm_s=np.full_like(t_rank, o.gemm_weight_bytes / bw),
        comp_gemm_s=t_pad * o.gemm_s_per_token_peak + t_logits_pad * o.lm_head_s_per_token_peak,
        mem_moe_s=moe_bytes / bw, comp_moe_s=comp_moe, mem_attn_s=(kv_bytes + ctx_bytes) / bw,
        # the MLA context up-projection scales with the cached context like attention (attention class, so the
        # simulation's per-chunk attention tables carry it), at the kv_b_proj weights' dtype peak
        comp_attn_s=attn_fl / o.attn_peak_flops + ctx_fl / o.mla_ctx_peak_flops, mem_idx_s=idx_bytes / bw + zero, comp_idx_s=idx_fl / o.idx_peak_flops,
        mem_rec_s=rec_bytes / bw + zero, comp_rec_s=rec_fl / o.attn_peak_flops,
        kernels=np.full_like(t_rank, float(o.kernels_per_step)), graphed=graphed,
        overlap=np.full_like(t_rank, 1.0 if sc.overlaps_cpu else 0.0), batch=b_all, tokens=t_glob,
        floor_s=floor, coll_latency_s=c_lat, coll_bandwidth_s=c_bw,
        gemm_mem_ratio=r_comp * (bw / o.peak_bw_bytes_per_s), gemm_comp_ratio=r_comp, moe_curve_s=moe_curve,
        moe_curve_kernels=moe_kernels, gemm_op_s=dense.time_s + zero,
        mem_gemm_rest_s=np.full_like(t_rank, max(o.gemm_weight_bytes - cov_bytes, 0.0) / bw),
        comp_gemm_rest_s=(t_pad * max(o.gemm_s_per_token_peak - cov_tok, 0.0)
                          + (0.0 if cov_head else t_logits_pad * o.lm_head_s_per_token_peak)),
        gemm_op_kernels=zero + dense.kernels,
        # no curve time (a prefill-path verify, a chunk after a cached prefix): nothing to bound
        attn_op_s=(np.where(attn_op <= 0.0, 0.0, np.maximum(attn_op, b * kv_read_bytes / o.peak_bw_bytes_per_s))
                   + zero if attn_op is not None else zero),
        mem_attn_rest_s=t_rank * o.kv_write_bytes_per_token / bw + zero,
        attn_op_kernels=(np.where(vp, 0.0, attn_layers * ATTENTION_KERNELS_PER_LAYER) + zero
                         if attn_op is not None else zero),
        eager_kernels=np.where(vp, attn_layers * MLA_PREFILL_PATH_KERNELS_PER_LAYER, 0.0) + zero,
        routing_s=moe_routing_s(o.n_moe_layers, sc.gpu.vendor, graphed) + zero,
        colls=colls,
    )


def _moe_layer_roofline(sc: Deployment, o: Ops) -> Arr:
    """One MoE layer's routed experts on one GPU at the probe token counts, at 100 % of the achieved bandwidth and
    of the peak: max(touched experts on this GPU · expert bytes / BW, tokens · expert FLOP time per layer)."""
    touched = touched_experts(sc.routing, sc.model.model_type, o.n_experts, o.top_k, PROBE_TOKENS)
    mem = touched * (o.experts_per_gpu / o.n_experts) * o.expert_bytes / o.bw_bytes_per_s
    return np.asarray(np.maximum(mem, PROBE_TOKENS * o.expert_s_per_token_peak / o.n_moe_layers))


# Kernels per MLA layer that a verify block on the MLA prefill path launches outside the CUDA graph: vLLM splits its
# piecewise graphs at the attention op, and Triton MLA cannot capture multi-token blocks (it declares
# UNIFORM_SINGLE_TOKEN_DECODE: FULL -> PIECEWISE under speculative decoding, vllm#44492). Counted from the path's
# ops (approximate): the attention kernels of a layer (ATTENTION_KERNELS_PER_LAYER, measured) + the W_UK and W_UV
# batched GEMMs + the kv_b_proj up-projection of the cached context + the merge of the context and new-token states.
MLA_PREFILL_PATH_KERNELS_PER_LAYER = ATTENTION_KERNELS_PER_LAYER + 4.0


def verify_as_prefill(sc: Deployment) -> bool:
    """Whether the engine's default MLA backend on this GPU runs a speculative verify block through its MLA prefill
    path (specs/data/engines/vllm.toml speculative.mla_verify_as_prefill_on; vLLM's TRITON_MLA on sm_8x and sm_120)."""
    return (sc.model.attention_kind == "mla" and bool(sc.model.kv_lora_rank)
            and sc.gpu.compute_capability in sc.engine.speculative.mla_verify_as_prefill_on)


def _indexer(o: Ops, b: Arr, t_rank: Arr, L_eff: Arr, L_q: Arr, prefill: bool) -> tuple[Arr, Arr]:
    """DeepSeek sparse-attention indexer of a step: (bytes, FLOPs) per GPU. Bytes = b · Σ (index_dim + 4) B per
    effective context token (fp8 keys + fp32 scale, read once per sequence); FLOPs = T_rank · Σ 2·ih·id per effective
    context token a query sees (every query token scores the whole context: q_len × context; ops.py)."""
    zero = np.zeros_like(t_rank)
    if not o.idx_terms:
        return zero, zero
    nbytes = b * sum(ct.bytes_per_token * ct.tokens(L_eff) for ct in o.idx_terms)
    fl = t_rank * sum((ct.flops_prefill if prefill else ct.flops_decode) * ct.tokens(L_q) for ct in o.idx_terms)
    return nbytes + zero, fl + zero


def _recurrent(o: Ops, b: Arr, t_rank: Arr, prefill: bool) -> tuple[Arr, Arr]:
    """Linear-attention / Mamba layers of a step: (bytes, FLOPs) per GPU. Bytes = b · state read + written (fp32)
    + in prefill T_rank · the chunk states the scan writes and reads; FLOPs = T_rank · per-token recurrence (decode,
    verify) or chunked-scan FLOPs (prefill). Formulas in mixers.py."""
    r = o.rec
    if not r.state_bytes_per_seq:
        zero = np.zeros_like(t_rank)
        return zero, zero
    nbytes = b * r.state_bytes_per_seq + (t_rank * r.bytes_prefill_per_token if prefill else 0.0)
    return nbytes, t_rank * (r.flops_prefill_per_token if prefill else r.flops_decode_per_token)


def step_arrays(sc: Deployment, batch: ArrayLike, ctx: ArrayLike, tokens_per_seq: ArrayLike,
                prefill: bool = False) -> dict[str, Arr]:
    """Vectorised step: `combine_step(step_parts(...), sc.efficiency)`."""
    return combine_step(step_parts(sc, batch, ctx, tokens_per_seq, prefill), sc.efficiency)


def per_scenario(what: str, sc: Deployment, fn: Callable[[], object]) -> object:
    """`fn()` cached with the scenario's ops (model_for), per engine version, routing and curve switches."""
    eff = sc.efficiency
    key = (what, sc.engine_version, sc.routing, float(np.mean(eff.op_curves)), float(np.mean(eff.moe_curve)))
    memo = model_for(sc).memo
    if key not in memo:
        memo[key] = fn()
    return memo[key]


def moe_curve_over_roofline(sc: Deployment) -> float:
    """The measured expert curve over its layer's roofline (measured_ops.curve_over_roofline; nan: none)."""
    o = model_for(sc).ops
    if not o.n_moe_layers:
        return float("nan")
    return float(per_scenario("moe_gate", sc, lambda: curve_over_roofline(sc, _moe_layer_roofline(sc, o))))  # type: ignore[arg-type]


def measured_attention(sc: Deployment) -> bool:
    """Whether this scenario's decode attention is priced at a measured per-layer curve (Efficiency.op_curves on
    and a curve covering its layers on its GPU and engine: measured_ops.decode_attention_curve)."""
    if np.all(sc.efficiency.op_curves <= 0.5):
        return False
    probe = np.array([1.0]), np.array([float(max(sc.isl, 1))])
    return bool(per_scenario("attention", sc, lambda: decode_attention_curve(sc, *probe) is not None))


def public_name(key: str) -> str:
    """Internal collective key -> the name printed (the lm_head logits gather is `gather_logits`)."""
    return "gather_logits" if key == hw.ALL_GATHER + ":logits" else key


def collective_costs(p: StepParts, a: dict[str, Arr], i: int = 0) -> dict[str, CollectiveCost]:
    """The collectives of point i of a combined step, by public name."""
    def at(x: Arr) -> float:
        return float(np.broadcast_to(x, a["step"].shape).ravel()[i])

    return {public_name(k): CollectiveCost(c.calls, at(c.bytes_per_call), at(a["coll:" + k]))
            for k, c in p.colls.items()}


def _to_prediction(sc: Deployment, p: StepParts, batch: int, ctx: int, kind: str) -> StepPrediction:
    a = combine_step(p, sc.efficiency)
    terms = {k: float(a[k].ravel()[0]) for k in TERMS}
    classes = {k: float(a[k].ravel()[0]) for k in ("gemm", "moe", "attention", "communication")}
    classes.update({"norm": float(a["kernels"].ravel()[0]), "other": float(a["cpu"].ravel()[0])})
    return StepPrediction(
        step_time_s=float(a["step"].ravel()[0]), terms_s=terms, dominant=max(terms, key=lambda k: terms[k]),
        collectives=collective_costs(p, a), floor_s=float(a["floor"].ravel()[0]), class_time_s=classes,
        batch=batch, tokens=int(round(float(a["tokens"].ravel()[0]))), context_len=ctx, kind=kind,
    )


def decode_step(sc: Deployment, batch: int, context_len: int, tokens_per_seq: int = 1) -> StepPrediction:
    """One decode step of `batch` sequences (all dp ranks) at `context_len` tokens of context each.
    tokens_per_seq > 1 is a speculative verification of k+1 tokens per sequence."""
    if batch < 1 or context_len < 0 or tokens_per_seq < 1:
        raise ScenarioError(f"decode_step: batch={batch}, context_len={context_len}, tokens={tokens_per_seq}")
    return _to_prediction(sc, step_parts(sc, batch, context_len, tokens_per_seq), batch, context_len, "decode")


def prefill_step(sc: Deployment, tokens: int, batch: int = 1, context_len: int = 0) -> StepPrediction:
    """One prefill chunk of `tokens` tokens in total, split evenly over `batch` sequences that already hold
    `context_len` tokens of context each (chunked prefill continues after earlier chunks)."""
    if tokens < 1 or batch < 1 or context_len < 0:
        raise ScenarioError(f"prefill_step: tokens={tokens}, batch={batch}, context_len={context_len}")
    p = step_parts(sc, batch, context_len, tokens / batch, prefill=True)
    return _to_prediction(sc, p, batch, context_len, "prefill")
