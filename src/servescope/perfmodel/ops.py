"""Per-GPU operation inventory of one scenario: weight bytes, FLOPs per token, KV/state bytes per context token,
kernels and collectives per step. Pure arithmetic on ModelSpec + QuantConfig + layout; cached per scenario.

What it does: turns a Scenario into `Ops` (constants, SI units) that step.py combines with a batch and context
length. Formulas (per GPU; h hidden, nh/nkv heads, d head_dim, kvb KV bytes/element):
  weights read    attention·(1/tp) + replicated MLA parts + dense_mlp/tp + shared/tp + lm_head/tp, each × bytes/param
                  + the MoE router h·E per MoE layer, bf16, replicated on every rank (read every step)
  expert bytes    per_expert/moe_tp × bytes/param, per distinct expert touched (see step.py)
  GEMM FLOPs      2 · params_on_gpu per token, timed at the peak of each part's GEMM dtype
  KV read / seq   GQA 2·max(nkv/tp,1)·d·kvb per token per layer (sliding layers: min(L, window));
                  MLA (kv_lora+rope)·kvb per token per layer, replicated on every TP rank; DSA reads min(L, topk)
                  latent tokens plus (index_dim+4) B of indexer keys per token; linear/Mamba layers read and write
                  their fp32 state (2·state·4 B / tp) per sequence
  attention FLOPs GQA 4·(nh/tp)·d per context token; MLA absorbed decode 2·(nh/tp)·(2·kv_lora+rope),
                  MLA prefill 2·(nh/tp)·(nope+rope+v); DSA indexer 2·ih·id per context token
  FP8 KV decode   on a GPU without the hardware FP8 conversion (below sm_89, kv_dequant.py): + KV elements per
                  context token · s_per_element · attention peak, as decode FLOP-equivalents of each context term
                  (the ALU time joins the attention class's compute side; a decode reads each element once per
                  sequence, so a verify block of t tokens counts it t times: an upper bound; prefill leaves it out)
  DSA indexer     priced apart from the attention (its own kernels, its own roofline in step.py): (index_dim+4) B
                  of fp8 keys + fp32 scale per context token, 2·ih·id FLOPs per query per context token at the fp8
                  peak (vLLM 0.19 model_executor/layers/sparse_attn_indexer.py: DeepGEMM fp8_mqa_logits in prefill,
                  fp8_paged_mqa_logits in decode); bf16 peak on a GPU without fp8
  recurrent, MLA  linear-attention / Mamba layers and MLA's context up-projection in a prefill chunk: mixers.py
What it does not: choose efficiencies, batch sizes or combine terms into time (step.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from servescope.errors import BadConfig
from servescope.perfmodel.kv_dequant import kv_dequant
from servescope.perfmodel.mixers import Recurrent, mla_context_per_token, recurrent
from servescope.specs import tables
from servescope.specs.hardware import GpuSpec
from servescope.specs.quant import QuantScheme, scheme

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

# Kernels per layer part (collectives counted apart), from data/kernel_counts.toml [model]: counted in real engine
# traces by data-build/measure_kernels_per_layer.py where a trace of that family exists (GQA attention, MoE and the per-step
# kernels: vLLM FULL-graph decode of gpt-oss-20b; dense MLP: SGLang Qwen3-8B), transferred to the other attention /
# mixer kinds, typical and not measured for MLA's extra ops and shared experts (no trace); each key says which.
# DeepSeek sparse-attention indexer, per layer that has one, counted from vLLM 0.19's decode path
# (models/deepseek_v2.py Indexer.forward, layers/sparse_attn_indexer.py): wq_b, wk and weights_proj GEMMs, k_norm,
# rotary, q fp8 quant, k quant + cache insert, fp8_paged_mqa_logits, top-k; the elementwise cat/scale ops between
# them are left out (torch.compile fuses them into neighbours).
KERNELS_INDEXER = 9
ACT_BYTES = 2.0  # activations travel in bf16
DEFAULT_HBM_BW_EFFICIENCY = 0.8  # AIC-SYS mem_bw_empirical_scaling_factor, for a GPU file without the field


@dataclass(frozen=True)
class CtxTerm:
    """A context-length-dependent cost: effective tokens = f(L) per the `kind`, times byte and FLOP coefficients."""

    kind: str  # "all" | "window" | "cap" | "ratio" | "ratio_cap"
    param: float
    bytes_per_token: float  # per sequence, per effective context token (all layers of this kind, per GPU)
    flops_decode: float  # per query token per effective context token
    flops_prefill: float
    is_indexer: bool = False  # a DeepSeek sparse-attention indexer term (priced apart, step.py)

    def tokens(self, ctx: np.ndarray) -> np.ndarray:
        if self.kind == "all":
            return ctx
        if self.kind in ("window", "cap"):
            return np.asarray(np.minimum(ctx, self.param))
        if self.kind == "ratio":
            return ctx / self.param
        return np.minimum(ctx / 4.0, self.param)  # ratio_cap: V4 layers compressed 4x then top-k


@dataclass(frozen=True)
class Ops:
    """Per-GPU constants of one scenario (whole model depth: a token traverses every PP stage)."""

    gemm_weight_bytes: float
    gemm_s_per_token_peak: float  # seconds per token at 100% of each part's peak (lm_head apart)
    lm_head_s_per_token_peak: float  # logits GEMM per token that is sampled (every decode/verify token; the last
    # token of each sequence in a prefill chunk: engines compute logits only there, vLLM V1 `logits_indices`)
    expert_bytes: float  # one routed expert of one layer on this GPU
    n_moe_layers: int
    n_experts: int
    top_k: int
    experts_per_gpu: float
    expert_s_per_token_peak: float  # per *global* token
    ctx_terms: tuple[CtxTerm, ...]  # the attention's own context terms (KV / latent reads, QK and PV FLOPs)
    idx_terms: tuple[CtxTerm, ...]  # DeepSeek sparse-attention indexer: fp8 keys + scale, q·k logits (priced apart)
    rec: Recurrent  # linear-attention / Mamba layers (mixers.py)
    mla_ctx_flops_per_token: float  # prefill chunk: kv_b_proj up-projection per cached context token (mixers.py)
    mla_ctx_bytes_per_token: float  # ... and the k/v it materialises (written, then read)
    kv_write_bytes_per_token: float
    attn_peak_flops: float
    idx_peak_flops: float  # the indexer's logits GEMM runs in fp8 (DeepGEMM fp8_mqa_logits; bf16 without fp8)
    mla_ctx_peak_flops: float  # peak of the attention weights' GEMM dtype (kv_b_proj)
    bw_bytes_per_s: float  # achieved: datasheet × the GPU's hbm_bw_efficiency (measured or sourced, specs/data/gpus)
    peak_bw_bytes_per_s: float  # datasheet (the floor uses it)
    kernels_per_step: int
    ar_per_step: int  # TP all-reduces (tp>1), incl. the vocab-parallel embedding one
    moe_a2a_layers: int  # MoE layers using dispatch/combine (attention-DP)
    hidden: int
    vocab: int


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense tensor-core peak for a GEMM dtype, falling back fp4 -> fp8 -> bf16 where the GPU lacks it."""
    fl = gpu.flops_per_s
    for key in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16"), "int8": ("int8", "fp8", "bf16")}.get(
        dtype, ("bf16",)
    ):
        v = float(fl.get(key) or 0.0)
        if v > 0:
            return v
    raise ValueError(f"GPU {gpu.name} has no bf16 FLOP/s peak")


def _time_peak(params: float, s: QuantScheme, gpu: GpuSpec) -> float:
    return 2.0 * params / peak_flops(gpu, s.gemm_dtype)


def build_ops(sc: Deployment) -> Ops:
    m, qc, g = sc.model, sc.quant, sc.gpu
    p, tp = m.params, sc.tp
    attn_sh = (p.attention - p.attention_replicated) / tp
    attn_rep = p.attention_replicated
    parts = ((attn_sh + attn_rep, qc.attention), (p.dense_mlp / tp, qc.dense_mlp),
             (p.shared_experts / tp, qc.shared_experts), (p.router, scheme("bf16")), (p.lm_head / tp, qc.lm_head))
    wbytes = sum(n * s.bytes_per_param for n, s in parts)
    gemm_s = sum(_time_peak(n, s, g) for n, s in parts[:-1])
    lm_head_s = _time_peak(p.lm_head / tp, qc.lm_head, g)
    n_moe = m.n_moe_layers
    exp_s = _time_peak(m.top_k * p.per_expert * n_moe / (sc.tp * sc.dp), qc.experts, g) if n_moe else 0.0
    kernels = kernels_per_step(sc)
    a2a = n_moe if (sc.dp > 1 and n_moe) else 0
    terms = _with_kv_dequant(sc, _ctx_terms(sc))
    mla_fl, mla_b = mla_context_per_token(sc)
    sublayers = sum(1 for a in m.layer_attention if a != "none") + sum(1 for x in m.layer_mlp if x != "none")
    ar = (sublayers - a2a + 1) if tp > 1 else 0
    return Ops(
        gemm_weight_bytes=wbytes, gemm_s_per_token_peak=gemm_s, lm_head_s_per_token_peak=lm_head_s,
        expert_bytes=p.per_expert / sc.moe_tp * qc.experts.bytes_per_param, n_moe_layers=n_moe,
        n_experts=m.n_routed_experts, top_k=m.top_k,
        experts_per_gpu=m.n_routed_experts / sc.ep if n_moe else 0.0, expert_s_per_token_peak=exp_s,
        ctx_terms=tuple(t for t in terms if not t.is_indexer), idx_terms=tuple(t for t in terms if t.is_indexer),
        rec=recurrent(sc),
        mla_ctx_flops_per_token=mla_fl, mla_ctx_bytes_per_token=mla_b,
        kv_write_bytes_per_token=kv_bytes_per_token(sc), attn_peak_flops=peak_flops(g, "bf16"),
        idx_peak_flops=peak_flops(g, "fp8"), mla_ctx_peak_flops=peak_flops(g, qc.attention.gemm_dtype),
        bw_bytes_per_s=achieved_bw_bytes_per_s(g), peak_bw_bytes_per_s=float(g.hbm_bw_bytes_per_s),
        kernels_per_step=kernels, ar_per_step=ar,
        moe_a2a_layers=a2a, hidden=m.hidden_size, vocab=m.vocab_size,
    )


@lru_cache(maxsize=1)
def kernel_counts() -> dict[str, float]:
    """Kernels per layer part, [model] of data/kernel_counts.toml (data-build/measure_kernels_per_layer.py): attention,
    mla_extra, dense_mlp, moe, shared_expert, step."""
    doc = tables.kernel_counts()
    keys = ("attention", "mla_extra", "dense_mlp", "moe", "shared_expert", "step")
    try:
        sec = doc["model"]
        return {k: float(sec[k]) for k in keys}
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"specs/data/kernel_counts.toml [model]: {e}") from None


def kernels_per_step(sc: Deployment) -> int:
    """Kernels of one forward step on one GPU, collectives apart (each priced by the step's overhead term):
    step + Σ_attention/mixer layers (attention [+ mla_extra on MLA layers]) + dense_mlp · dense layers
    + moe · MoE layers + shared_expert · MoE layers with a shared expert + 9 · DSA indexer layers, rounded to a
    whole kernel. Counts per part: `kernel_counts()`."""
    m, k = sc.model, kernel_counts()
    attn = k["attention"] + (k["mla_extra"] if m.attention_kind == "mla" else 0.0)
    n = k["step"] + attn * sum(1 for a in m.layer_attention if a != "none")
    n += sum({"dense": k["dense_mlp"], "moe": k["moe"]}.get(x, 0.0) for x in m.layer_mlp)
    n += k["shared_expert"] * (m.n_moe_layers if m.shared_intermediate_size else 0)
    return round(n + KERNELS_INDEXER * _indexer_layers(sc))


def achieved_bw_bytes_per_s(gpu: GpuSpec) -> float:
    """Device-memory bandwidth a streaming kernel reaches: datasheet × `hbm_bw_efficiency` (a measured fraction
    where one is published, else aiconfigurator's empirical 0.8; its source is in specs/data/gpus)."""
    return float(gpu.hbm_bw_bytes_per_s) * (gpu.hbm_bw_efficiency or DEFAULT_HBM_BW_EFFICIENCY)


def kv_bytes_per_token(sc: Deployment) -> float:
    """KV-cache bytes one token occupies on one GPU, over all layers holding full KV (sliding layers included)."""
    m, kvb = sc.model, sc.quant.kv.bytes_per_param
    if m.attention_kind == "gqa":
        n_att = sum(1 for a in m.layer_attention if a in ("full", "sliding"))
        return n_att * 2.0 * max(m.n_kv_heads // sc.tp, 1) * m.head_dim * kvb
    idx = (m.index_head_dim + 4.0) if m.index_n_heads else 0.0
    return m.n_layers * (m.kv_elems_per_token_layer() * kvb + idx)


def _ctx_terms(sc: Deployment) -> tuple[CtxTerm, ...]:
    m, tp, kvb = sc.model, sc.tp, sc.quant.kv.bytes_per_param
    nh = m.n_heads / tp
    if m.attention_kind == "gqa":
        per_layer = 2.0 * max(m.n_kv_heads // tp, 1) * m.head_dim * kvb
        fl = 4.0 * nh * m.head_dim
        n_full, n_swa = m.n_attn("full"), m.n_attn("sliding")
        out = [CtxTerm("all", 0, n_full * per_layer, n_full * fl, n_full * fl)]
        if n_swa:
            out.append(CtxTerm("window", m.sliding_window, n_swa * per_layer, n_swa * fl, n_swa * fl))
        return tuple(out)
    if m.attention_kind == "mla":
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        fd = 2.0 * nh * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        fp = 2.0 * nh * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        n = m.n_layers
        if not m.index_topk:
            return (CtxTerm("all", 0, n * lat * kvb, n * fd, n * fp),)
        ix_fl = 2.0 * m.index_n_heads * m.index_head_dim
        return (CtxTerm("cap", m.index_topk, n * lat * kvb, n * fd, n * fp),
                CtxTerm("all", 0, n * (m.index_head_dim + 4.0), n * ix_fl, n * ix_fl, True))
    return _v4_terms(sc, nh, kvb)


def _with_kv_dequant(sc: Deployment, terms: tuple[CtxTerm, ...]) -> tuple[CtxTerm, ...]:
    """The attention's context terms with the FP8 KV decode of a GPU without the hardware conversion added to their
    decode FLOPs: elements/token (bytes/token ÷ KV bytes/element) · s_per_element (kv_dequant.py) · the attention
    peak, so that FLOPs / peak gives back the decode's ALU seconds; unchanged where it is 0 or cannot be priced."""
    s = kv_dequant(sc.gpu, sc.quant.kv).s_per_element
    kvb = sc.quant.kv.bytes_per_param
    if not s or kvb <= 0:
        return terms
    peak = peak_flops(sc.gpu, "bf16")
    return tuple(t if t.is_indexer else replace(t, flops_decode=t.flops_decode + t.bytes_per_token / kvb * s * peak)
                 for t in terms)


def _indexer_layers(sc: Deployment) -> int:
    """Layers running a DeepSeek sparse-attention indexer: every attention layer of an MLA+DSA model, the ratio-4
    layers of DeepSeek-V4, none elsewhere."""
    m = sc.model
    if not m.index_n_heads:
        return 0
    if m.attention_kind == "v4":
        return sum(1 for r in m.v4_compress if r == 4)
    return sum(1 for a in m.layer_attention if a in ("full", "sliding")) if m.attention_kind == "mla" else 0


def _v4_terms(sc: Deployment, nh: float, kvb: float) -> tuple[CtxTerm, ...]:
    """DeepSeek-V4 (approximate): every layer attends a 128-token window; ratio-4 layers add top-k of the 4x
    compressed cache (plus an indexer over it), ratio-128 layers add the whole 128x compressed cache."""
    m = sc.model
    d, n = m.head_dim, m.n_layers
    fl = 4.0 * nh * d
    r4 = sum(1 for r in m.v4_compress if r == 4)
    r128 = sum(1 for r in m.v4_compress if r == 128)
    ix_fl = 2.0 * m.index_n_heads * m.index_head_dim
    return (
        CtxTerm("window", m.sliding_window or 128, n * d * kvb, n * fl, n * fl),
        CtxTerm("ratio_cap", m.index_topk, r4 * d * kvb, r4 * fl, r4 * fl),
        CtxTerm("ratio", 4.0, r4 * (m.index_head_dim + 4.0), r4 * ix_fl, r4 * ix_fl, True),
        CtxTerm("ratio", 128.0, r128 * d * kvb, r128 * fl, r128 * fl),
    )
