"""Per-op cost models: FLOPs and bytes as pure functions of an op's sizes (issue 19 part 2).

What it does: dense GEMM by dtype, block-scaled and 4-bit GEMMs (`quantized_gemm_cost` with the `QUANT_LAYOUTS` of FP8
128×128 blocks, MXFP4, NVFP4, INT4 W4A16, each with its source), grouped MoE GEMMs, attention (prefill FLOPs, decode KV
bytes; paged attention from a step's query/KV length sums; MLA decode over the latent; sparse top-k attention),
bytes-only ops; formula, units and assumptions in each docstring; and the element sizes / peak keys of `Input type`
spellings. `analysis.op_costs` maps a traced op's `Input Dims` onto these.
What it does not do: read traces, files or specs, or decide which op a kernel ran (analysis.roofline links them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from servescope.units import BYTES_PER_ELEMENT

# `Input type` spelling → its dtype in units.BYTES_PER_ELEMENT; FP4 x2 packs two values per stored element (1 B per
# element of the shape as recorded). Logical sizes for the cost models (LOGICAL_BYTES): bf16/fp16 2, fp8 1,
# fp4 0.5, int4 0.5.
_INPUT_TYPE_DTYPE: dict[str, str] = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64", "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8",
    "c10::Float8_e8m0fnu": "fp8", "c10::Float4_e2m1fn_x2": "fp4x2", "int": "int32", "long int": "int64",
    "long": "int64", "short int": "int16", "short": "int16", "signed char": "int8", "unsigned char": "uint8",
    "bool": "bool",
}
ELEMENT_BYTES: dict[str, float] = {spelling: BYTES_PER_ELEMENT[d] for spelling, d in _INPUT_TYPE_DTYPE.items()}
LOGICAL_BYTES = {d: float(BYTES_PER_ELEMENT[d]) for d in ("bf16", "fp16", "fp8", "fp4", "int4", "int8", "fp32")}
# `Input type` → the key of a datasheet peak (GpuSpec.flops_per_s); fp16 runs at the bf16 tensor-core rate.
PEAK_KEY: dict[str, str] = {
    "c10::BFloat16": "bf16", "c10::Half": "bf16", "float": "fp32", "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8", "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8",
}
PACKED_4BIT = ("unsigned char", "c10::Float4_e2m1fn_x2")  # two 4-bit values per stored byte
MAX_DIM = 1 << 40  # a larger dim is damage, not a tensor


# ------------------------------------------------------------------------------------------------ cost models
def gemm_cost(m: int, n: int, k: int, b_in: float, b_out: float, batch: int = 1) -> tuple[float, float]:
    """Dense GEMM [M,K]×[K,N] (× batch): FLOPs = 2·batch·M·N·K; bytes = batch·((M·K + K·N)·b_in + M·N·b_out),
    b = bytes per element (BF16 2, FP8 1, FP4 0.5). Each operand read once and C written once (no bias, no scales)."""
    return 2.0 * batch * m * n * k, float(batch) * ((m * k + k * n) * b_in + m * n * b_out)


@dataclass(frozen=True)
class QuantLayout:
    """How a quantized GEMM stores its operands: bytes per weight / activation element, and one scale of
    `*_scale_bytes` per `*_group_k` elements along K (× `w_block_n` along N for 2-d weight blocks); a group of 0
    means no scales for that operand (16-bit activations)."""

    w_bytes: float
    w_group_k: int
    w_block_n: int
    w_scale_bytes: float
    a_bytes: float
    a_group_k: int
    a_scale_bytes: float
    source: str


QUANT_LAYOUTS: dict[str, QuantLayout] = {
    # DeepSeek-V3 technical report (arXiv 2412.19437 §3.3.2): 128×128 weight blocks, 1×128 activation tiles, FP32 scales
    "fp8_block": QuantLayout(1.0, 128, 128, 4.0, 1.0, 128, 4.0, "DeepSeek-V3 report §3.3.2"),
    # OCP Microscaling Formats v1.0 §5: 32-element blocks, one E8M0 (1 B) scale; gpt-oss runs MXFP4 weights with
    # 16-bit activations (W4A16)
    "mxfp4": QuantLayout(0.5, 32, 1, 1.0, 2.0, 0, 0.0, "OCP MX v1.0 §5"),
    # NVIDIA NVFP4 (Blackwell): 16-element blocks, one E4M3 (1 B) scale, activations NVFP4 too (W4A4); the per-tensor
    # FP32 scale is 4 B and left out
    "nvfp4": QuantLayout(0.5, 16, 1, 1.0, 0.5, 16, 1.0, "NVIDIA NVFP4 (Blackwell block scaling, 16 elements)"),
    # GPTQ/AWQ-style INT4 weights, one 16-bit scale per 128 weights along K, 16-bit activations
    "w4a16": QuantLayout(0.5, 128, 1, 2.0, 2.0, 0, 0.0, "GPTQ/AWQ group size 128"),
}


def quantized_gemm_cost(m: int, n: int, k: int, layout: QuantLayout, b_out: float = 2.0) -> tuple[float, float]:
    """Block-scaled / 4-bit GEMM [M,K]×[K,N]: FLOPs = 2·M·N·K; bytes = M·K·b_a + K·N·b_w + M·N·b_out + weight scales
    ⌈K/g_w⌉·⌈N/n_w⌉·s_w + activation scales M·⌈K/g_a⌉·s_a (none when g_a = 0). Operands read once, no zero points."""
    w_scales = math.ceil(k / layout.w_group_k) * math.ceil(n / layout.w_block_n) * layout.w_scale_bytes
    a_scales = m * math.ceil(k / layout.a_group_k) * layout.a_scale_bytes if layout.a_group_k else 0.0
    return 2.0 * m * n * k, m * k * layout.a_bytes + k * n * layout.w_bytes + m * n * b_out + w_scales + a_scales


def w4a16_gemm_cost(m: int, n: int, k: int, group_size: int, b_act: float = 2.0,
                    b_scale: float = 2.0) -> tuple[float, float]:
    """INT4 W4A16 GEMM: FLOPs = 2·M·N·K; bytes = M·K·b_act + K·N·0.5 (packed weights) + (K/group)·N·b_scale
    (group scales) + M·N·b_act (output). Zero points, if any, are not counted."""
    layout = QuantLayout(0.5, group_size, 1, b_scale, b_act, 0, 0.0, "W4A16")
    return quantized_gemm_cost(m, n, k, layout, b_out=b_act)


def moe_gemm_cost(tokens: int, top_k: int, experts: int, hidden: int, inter: int, b_w: float, b_act: float,
                  gated: bool = True) -> tuple[float, float]:
    """Grouped MoE GEMMs (up[+gate] then down) over the R = tokens·top_k routed rows: FLOPs = 2·R·H·I·(3 gated, 2
    not); bytes = weights of the touched experts E_t·H·I·(3|2)·b_w + rows in and out 2·R·H·b_act + the
    intermediate written and read 2·R·I·(2|1)·b_act, with E_t = min(E, R) (a touched expert's weights read once;
    every expert touched once R ≥ E). Tokens per expert = R / E_t."""
    rows, mats = tokens * top_k, 3 if gated else 2
    touched = min(experts, rows)
    inter_out = (2 if gated else 1) * inter
    return (2.0 * rows * hidden * inter * mats,
            touched * hidden * inter * mats * b_w + 2.0 * rows * hidden * b_act + 2.0 * rows * inter_out * b_act)


def attention_cost(batch: int, heads: int, s_q: int, s_k: int, d: int, kv_heads: int,
                   b_elem: float) -> tuple[float, float]:
    """Attention: FLOPs = 4·B·H·S_q·S_k·D (QKᵀ and PV, the full score matrix: no causal discount); bytes = Q and O
    (B·H·S_q·D each) + K and V read once (B·H_kv·S_k·D each), × b_elem. Decode (S_q = 1) is the KV read."""
    return (4.0 * batch * heads * s_q * s_k * d,
            float(b_elem) * (2 * batch * heads * s_q * d + 2 * batch * kv_heads * s_k * d))


def causal_pairs(sum_sq: float, sum_sqsk: float, sum_sqsq: float) -> float:
    """(query, key) pairs of causal attention over requests with sq new tokens on sk keys each (the new tokens last):
    Σ (sq·sk − sq·(sq − 1)/2) = Σ sq·sk − (Σ sq² − Σ sq)/2 (a decode token, sq = 1, sees its sk keys)."""
    return sum_sqsk - (sum_sqsq - sum_sq) / 2.0


def paged_attention_cost(heads: int, kv_heads: int, d: int, tokens: int, sum_sq: float, sum_sk: float,
                         sum_sqsq: float, sum_sqsk: float, b_q: float, b_kv: float) -> tuple[float, float]:
    """Paged attention of one layer over a step's requests (vLLM `detailed_trace_annotation` sums): FLOPs =
    4·H·D·causal_pairs (QKᵀ and PV); bytes = Q read and O written (tokens·H·D·b_q each, tokens = the op's rows,
    padding included) + each request's K and V read once (Σ sk·H_kv·D·b_kv each). Full attention: a sliding-window
    layer does less, so its achieved rates read high."""
    pairs = causal_pairs(sum_sq, sum_sqsk, sum_sqsq)
    return 4.0 * heads * d * pairs, 2.0 * tokens * heads * d * b_q + 2.0 * sum_sk * kv_heads * d * b_kv


def mla_decode_cost(batch: int, heads: int, sum_sk: float, kv_lora_rank: int, rope_dim: int,
                    b_kv: float, b_q: float = 2.0) -> tuple[float, float]:
    """MLA decode with absorbed projections (DeepSeek-V2/V3): each head scores every cached latent (rank r plus the
    rope part) and sums the latents: FLOPs = 2·H·Σsk·(r + rope) + 2·H·Σsk·r; bytes = the latent cache read once per
    request, Σsk·(r + rope)·b_kv (shared by all heads) + Q (B·H·(r + rope)·b_q) and O (B·H·r·b_q)."""
    qk = kv_lora_rank + rope_dim
    return (2.0 * heads * sum_sk * qk + 2.0 * heads * sum_sk * kv_lora_rank,
            sum_sk * qk * b_kv + batch * heads * qk * b_q + batch * heads * kv_lora_rank * b_q)


def sparse_topk_attention_cost(tokens: int, heads: int, top_k: int, d_qk: int, d_v: int,
                               b_kv: float, b_q: float = 2.0, shared_kv: bool = True) -> tuple[float, float]:
    """Sparse top-k attention (DeepSeek-V3.2 DSA, V4 sparse decode): each query attends to its top_k selected keys:
    FLOPs = 2·T·H·top_k·(d_qk + d_v); bytes = the selected keys gathered once per token, T·top_k·d_qk·b_kv (MLA: one
    latent shared by the heads; × H when `shared_kv` is False) + Q (T·H·d_qk·b_q) and O (T·H·d_v·b_q). The indexer
    that picks the keys is its own op."""
    kv = tokens * top_k * d_qk * b_kv * (1 if shared_kv else heads)
    return 2.0 * tokens * heads * top_k * (d_qk + d_v), kv + tokens * heads * (d_qk * b_q + d_v * b_q)


def bytes_cost(read: Iterable[float], written: Iterable[float]) -> tuple[float, float]:
    """Bytes-only ops (norm, activation, elementwise, cast, memcpy): FLOPs counted as 0; bytes = Σ bytes read +
    Σ bytes written, each tensor once (no cache reuse, no re-reads)."""
    return 0.0, float(sum(read)) + float(sum(written))
