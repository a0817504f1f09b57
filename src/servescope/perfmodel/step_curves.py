"""The step model's measured-curve terms, efficiency-free: the parts of a step that a measured curve prices where
it covers the GPU, the engine and the shape (each function returns its `StepParts` fields; zeros where no curve
applies, and combine.py falls back on the roofline of step_terms.py). Notation: step_terms.py's module docstring.

What it does not: read or fit the curves (gemm_curve.py, measured_ops.py, curve_bounds.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel.ep_balance import busiest_touched
from servescope.perfmodel.gemm_curve import curve_for
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
from servescope.perfmodel.ops import Ops, peak_flops
from servescope.perfmodel.routing import routing_draws
from servescope.perfmodel.step_model import StepModel, model_for, per_scenario
from servescope.perfmodel.step_terms import (
    AttentionWork,
    ExpertWork,
    Fields,
    StepShape,
    attention_layers,
)
from servescope.perfmodel.step_types import Arr

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment


def gemm_ratio_parts(sc: Deployment, o: Ops, s: StepShape) -> Fields:
    """Dense GEMMs on a measured GEMM curve (gemm_curve.py, own or transferred from the GPU's family):
    t_gemm = max(weight bytes / BW_peak, FLOPs / peak) · ratio(T_pad) (0: no curve)."""
    curve = curve_for(sc.gpu)
    r_comp = curve.ratio(s.t_pad) if curve is not None else s.zero
    return {"gemm_mem_ratio": r_comp * (o.bw_bytes_per_s / o.peak_bw_bytes_per_s), "gemm_comp_ratio": r_comp}


def dense_curve_parts(sc: Deployment, mdl: StepModel, s: StepShape) -> Fields:
    """Dense GEMMs on aiconfigurator's per-op curves: t_gemm = Σ_listed GEMMs count · max(curve(M), N·K·bytes /
    BW_peak) + the unlisted rest's weight bytes / BW and FLOPs at peak (measured_ops.dense_gemm_curve)."""
    o = mdl.ops
    dense = dense_gemm_curve(sc, mdl.gemms, s.t_pad, s.t_logits_pad, o.peak_bw_bytes_per_s)
    cov_bytes = sum(g.count * g.params * g.weights.bytes_per_param for g in dense.covered)
    cov_tok = sum(g.count * 2.0 * g.params / peak_flops(sc.gpu, g.weights.gemm_dtype)
                  for g in dense.covered if not g.sampled_only)
    cov_head = any(g.sampled_only for g in dense.covered)
    return {"gemm_op_s": dense.time_s + s.zero,
            "mem_gemm_rest_s": np.full_like(s.t_rank, max(o.gemm_weight_bytes - cov_bytes, 0.0) / o.bw_bytes_per_s),
            "comp_gemm_rest_s": (s.t_pad * max(o.gemm_s_per_token_peak - cov_tok, 0.0)
                                 + (0.0 if cov_head else s.t_logits_pad * o.lm_head_s_per_token_peak)),
            "gemm_op_kernels": s.zero + dense.kernels}


def moe_curve_parts(sc: Deployment, o: Ops, s: StepShape, x: ExpertWork) -> Fields:
    """Routed experts on the measured per-op curve (inside its domain, MAX_CURVE_OVER_ROOFLINE): MoE layers ·
    curve(the step's routing draws, padded rows included), never below the experts' read at BW_peak."""
    # the curve at the step's routing draws (verified tokens of a sequence partly alike), padded rows included
    draws = s.t_glob if s.prefill else routing_draws(s.b_all, s.t) * s.t_pad / np.maximum(s.t_rank, 1e-9)
    serving_moe = o.n_moe_layers and moe_curve_over_roofline(sc) <= MAX_CURVE_OVER_ROOFLINE  # nan: no curve
    layer = moe_layer_s(sc, draws) if serving_moe else None
    if layer is None:
        return {"moe_curve_s": s.zero, "moe_curve_kernels": s.zero + 0.0}
    # a curve measured on one layer's experts reused call after call can run L2-resident, faster than HBM allows; a
    # served step reads each layer's own experts: never below their read at the datasheet bandwidth
    return {"moe_curve_s": np.maximum(o.n_moe_layers * layer, x.bytes / o.peak_bw_bytes_per_s) + s.zero,
            "moe_curve_kernels": s.zero + o.n_moe_layers * MOE_KERNELS_PER_LAYER}


def attention_curve_parts(sc: Deployment, o: Ops, s: StepShape, a: AttentionWork) -> Fields:
    """Attention on the measured per-layer curves: decode t_attn = max(Σ_layers curve(b, L_eff) · f_dp, KV read /
    BW_peak) + the KV the step writes / BW; a prefill with no cached prefix at the prefill curve; none for a
    prefill-path verify or a chunk after a cached prefix (0: the roofline prices it)."""
    if s.prefill:  # a prompt with no cached prefix (the curve has none): the first chunk, or a whole prefill
        pf = prefill_attention_curve(sc, s.b, s.t)
        op = None if pf is None else np.where(s.L <= 0.0, pf, 0.0)
    else:
        op = decode_attention_curve(sc, s.b, s.L_eff)
    rest = s.t_rank * o.kv_write_bytes_per_token / o.bw_bytes_per_s + s.zero
    if op is None:
        return {"attn_op_s": s.zero, "mem_attn_rest_s": rest, "attn_op_kernels": s.zero}
    op = np.where(s.vp, 0.0, op * s.imb)  # busiest DP rank (dp_balance.py)
    # no curve time (a prefill-path verify, a chunk after a cached prefix): nothing to bound
    return {"attn_op_s": np.where(op <= 0.0, 0.0, np.maximum(op, s.b * a.kv_read_bytes / o.peak_bw_bytes_per_s))
            + s.zero, "mem_attn_rest_s": rest,
            "attn_op_kernels": np.where(s.vp, 0.0, attention_layers(sc) * ATTENTION_KERNELS_PER_LAYER) + s.zero}


def _moe_layer_roofline(sc: Deployment, o: Ops) -> Arr:
    """One MoE layer's routed experts on one GPU at the probe token counts, at 100 % of the achieved bandwidth and
    of the peak: max(touched experts on the busiest GPU (ep_balance) · expert bytes / BW, tokens · expert FLOP time
    per layer)."""
    busiest = busiest_touched(sc.routing, sc.model.model_type, o.n_experts, o.top_k, sc.ep, PROBE_TOKENS)
    mem = busiest * o.expert_bytes / o.bw_bytes_per_s
    return np.asarray(np.maximum(mem, PROBE_TOKENS * o.expert_s_per_token_peak / o.n_moe_layers))


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
