"""Per-op cost models: FLOPs and bytes of one op from its raw `Input Dims` / `Input type` (issue 19 parts 1–2).

What it does:
- cost models (pure functions, formula, units and assumptions in each docstring): dense GEMM by dtype, block-scaled
  and 4-bit GEMMs (`quantized_gemm_cost` with the `QUANT_LAYOUTS` of FP8 128×128 blocks, MXFP4, NVFP4, INT4 W4A16),
  grouped MoE GEMMs, attention (prefill FLOPs, decode KV bytes; paged attention from a step's query/KV length sums;
  MLA decode over the latent; sparse top-k attention), bytes-only ops (norm, activation, elementwise, cast, memcpy);
- `op_cost(name, dims_json, types_json)`: one op's work, or why it has none — conservative: an op whose layout this
  module cannot read is "unsupported", malformed dims are "malformed", never a guess. Ops are mapped only where their
  argument layout was seen in a shared trace or read in the engine's op schema (each mapping names which);
  paged-attention ops come back "lengths" with their head layout: their FLOPs need the step's Σ query·KV lengths
  (vLLM `detailed_trace_annotation`), which `roofline.attach_work` joins per step.
What it does not do: read files or specs, price an op without its weights among its inputs (vLLM `moe_forward`
carries only hidden states and router logits: no expert sizes, no top-k), count zero points, or format anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from servescope.trace._shapes import SHAPED_OPS

# Bytes per element by `Input type` spelling; FP4 x2 packs two values per stored element (1 B per element of the
# shape as recorded). Logical sizes for the cost models: bf16/fp16 2, fp8 1, fp4 0.5, int4 0.5.
ELEMENT_BYTES: dict[str, float] = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "c10::Float4_e2m1fn_x2": 1,
    "int": 4, "long int": 8, "long": 8, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
}
LOGICAL_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5, "int8": 1.0, "fp32": 4.0}
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


# ------------------------------------------------------------------------------------------------ op → cost
@dataclass(frozen=True)
class AttnShape:
    """A paged-attention op's layout, sized per step (`paged_attention_cost`): query rows, heads, KV heads, head
    dim, bytes per query and per KV element."""

    tokens: int
    heads: int
    kv_heads: int
    head_dim: int
    b_q: float
    b_kv: float


@dataclass(frozen=True)
class OpCost:
    """One op's work: `status` is `shaped`, `lengths` (paged attention: `attn` set, FLOPs per step), `malformed` or
    `unsupported`; FLOPs and bytes when shaped; (m, n, k) for GEMMs (measured curves look them up)."""

    status: str
    model: str | None = None
    dtype: str | None = None  # peak key (bf16, fp8, fp4, fp32, ...), None for bytes-only ops
    m: int | None = None  # GEMM rows (× batch), None otherwise
    flops: float | None = None
    bytes: float | None = None
    n: int | None = None
    k: int | None = None
    attn: AttnShape | None = None


MALFORMED = OpCost("malformed")
UNSUPPORTED = OpCost("unsupported")
Shape = tuple[int, ...]
Model = Callable[[list["Shape | None"], list[str]], OpCost]


class _Malformed(Exception):
    pass


def parse_inputs(dims_json: str, types_json: str | None) -> tuple[list[Shape | None], list[str]]:
    """Positions of `Input Dims` as shapes (a list of ints, each in [0, 2^40]) or None (a scalar `[]` or a tensor
    list), and `Input type` strings (padded with ""). Raises _Malformed on wrong nesting, strings, negative or
    huge dims, or undecodable JSON."""
    try:
        dims = json.loads(dims_json)
        types = json.loads(types_json) if types_json else []
    except (ValueError, RecursionError):
        raise _Malformed from None
    if not isinstance(dims, list) or not isinstance(types, list):
        raise _Malformed
    shapes: list[Shape | None] = []
    for entry in dims:
        if not isinstance(entry, list):
            raise _Malformed
        if all(type(d) is int for d in entry):
            if any(d < 0 or d > MAX_DIM for d in entry):
                raise _Malformed
            shapes.append(tuple(entry) if entry else None)
        elif all(isinstance(x, list) and all(type(d) is int and 0 <= d <= MAX_DIM for d in x) for x in entry):
            shapes.append(None)  # a tensor list
        else:
            raise _Malformed
    names = [t if isinstance(t, str) else "" for t in types]
    return shapes, names + [""] * (len(shapes) - len(names))


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _b(dtype: str) -> float | None:
    return ELEMENT_BYTES.get(dtype)


def _shapes(s: list[Shape | None], *positions: int, ndim: int | None = None) -> list[Shape] | None:
    """The shapes at `positions` (each of `ndim` dims when given), or None when one is missing."""
    out = [s[i] if i < len(s) else None for i in positions]
    if any(x is None or (ndim is not None and len(x) != ndim) for x in out):
        return None
    return [x for x in out if x is not None]


def _gemm(m: int, n: int, k: int, dt_a: str, dt_b: str, batch: int = 1, dt_out: str | None = None) -> OpCost:
    b_a, b_w, b_o = _b(dt_a), _b(dt_b), _b(dt_out or dt_a)
    if b_a is None or b_w is None or b_o is None or dt_a != dt_b or dt_a in PACKED_4BIT:
        return UNSUPPORTED  # mixed or packed operands: this model does not size them
    flops, nbytes = gemm_cost(m, n, k, b_a, b_o, batch)
    return OpCost("shaped", "gemm", PEAK_KEY.get(dt_a), m * batch, flops, nbytes, n, k)


def _mm(s: list[Shape | None], t: list[str], a: int, b: int) -> OpCost:
    """[M,K] @ [K,N] at positions a, b."""
    got = _shapes(s, a, b, ndim=2)
    if got is None:
        return MALFORMED
    (m, k), (k2, n) = got
    return _gemm(m, n, k, t[a], t[b]) if k == k2 else MALFORMED


def _linear(s: list[Shape | None], t: list[str]) -> OpCost:
    """input [.., K] with weight [N, K] (M = Π leading dims)."""
    got = _shapes(s, 0, 1)
    if got is None:
        return MALFORMED
    x, w = got
    if len(w) != 2 or len(x) < 1 or x[-1] != w[1]:
        return MALFORMED
    return _gemm(_numel(x[:-1]), w[0], x[-1], t[0], t[1])


def _bmm(s: list[Shape | None], t: list[str]) -> OpCost:
    got = _shapes(s, 0, 1, ndim=3)
    if got is None:
        return MALFORMED
    x, w = got
    if x[0] != w[0] or x[2] != w[1]:
        return MALFORMED
    return _gemm(x[1], w[2], x[2], t[0], t[1], batch=x[0])


def _matmul(s: list[Shape | None], t: list[str]) -> OpCost:
    """[.., K] @ [K, N] (a 2-d weight), or [B,M,K] @ [B,K,N]; any other broadcast is unsupported."""
    got = _shapes(s, 0, 1)
    if got is None:
        return MALFORMED
    x, w = got
    if len(w) == 2 and len(x) >= 1:
        return _gemm(_numel(x[:-1]), w[1], x[-1], t[0], t[1]) if x[-1] == w[0] else MALFORMED
    if len(x) == 3 and len(w) == 3 and x[0] == w[0]:
        return _bmm(s, t)
    return UNSUPPORTED


def _tensor_bytes(s: list[Shape | None], t: list[str]) -> list[float] | None:
    """Bytes of every tensor input (None when one has an unknown dtype)."""
    out = []
    for shape, dtype in zip(s, t, strict=True):
        if shape is None:
            continue
        b = _b(dtype)
        if b is None:
            return None
        out.append(_numel(shape) * b)
    return out


def _cutlass_scaled_mm(s: list[Shape | None], t: list[str]) -> OpCost:
    """vLLM `_C::cutlass_scaled_mm(out [M,N], a [M,K], b [K,N], a_scales, b_scales, bias)` (seen in the shared
    traces' op schema: csrc/torch_bindings.cpp): per-tensor, per-token or block-scaled FP8 (a_scales [M, K/128],
    b_scales [K/128, N/128]): the scales' and bias's bytes from their own Input Dims."""
    got = _shapes(s, 0, 1, 2, ndim=2)
    if got is None:
        return MALFORMED
    o, x, w = got
    if x[1] != w[0] or o != (x[0], w[1]):
        return MALFORMED
    base = _gemm(x[0], w[1], x[1], t[1], t[2], dt_out=t[0])
    extra = _tensor_bytes(s[3:6], t[3:6])
    if base.status != "shaped" or extra is None or base.bytes is None:
        return base if base.status != "shaped" else UNSUPPORTED
    return OpCost("shaped", "gemm", base.dtype, base.m, base.flops, base.bytes + sum(extra), base.n, base.k)


def _cutlass_scaled_fp4_mm(s: list[Shape | None], t: list[str]) -> OpCost:
    """NVFP4 GEMM `_C::cutlass_scaled_fp4_mm(out [M,N], a [M,K/2], b [N,K/2], block_scale_a, block_scale_b, alpha)`
    (vLLM csrc/torch_bindings.cpp, sgl-kernel common_extension.cc; not in a shared trace): a and b pack two FP4
    values per byte; bytes = a + b + both block scales + alpha (their own Input Dims) + out; peak key fp4."""
    got = _shapes(s, 0, 1, 2, ndim=2)
    if got is None or t[1] not in PACKED_4BIT or t[2] not in PACKED_4BIT:
        return MALFORMED if got is None else UNSUPPORTED
    o, a, w = got
    if a[1] != w[1] or o != (a[0], w[0]):
        return MALFORMED
    parts = _tensor_bytes(s[:6], t[:6])
    if parts is None:
        return UNSUPPORTED
    m, n, k = a[0], w[0], 2 * a[1]
    return OpCost("shaped", "gemm", "fp4", m, 2.0 * m * n * k, float(sum(parts)), n, k)


def _fused_experts(s: list[Shape | None], t: list[str]) -> OpCost:
    """vLLM / SGLang `{vllm,sglang}::{inplace,outplace}_fused_experts(hidden [T,H], w1 [E, 2I|I, H|H/2], w2 [E, H,
    I|I/2], topk_weights [T,k], topk_ids [T,k], ...)` (fused_moe.py of both engines; not in a shared trace): gated
    when w1 has 2·I rows; 4-bit weights packed two per uint8 (K halved); block scales not counted."""
    got = _shapes(s, 0, 1, 2, 4)
    if got is None:
        return MALFORMED
    x, w1, w2, ids = got
    if len(x) != 2 or len(w1) != 3 or len(w2) != 3 or len(ids) != 2 or ids[0] != x[0] or w1[0] != w2[0]:
        return MALFORMED
    (tokens, hidden), experts, top_k = x, w1[0], ids[1]
    packed = t[1] in PACKED_4BIT and w1[2] * 2 == hidden
    inter = w2[2] * (2 if packed else 1)
    b_w, b_act = (0.5 if packed else _b(t[1])), _b(t[0])
    if b_w is None or b_act is None or (not packed and w1[2] != hidden) or w2[1] != hidden or w1[1] not in (
            inter, 2 * inter):
        return UNSUPPORTED
    flops, nbytes = moe_gemm_cost(tokens, top_k, experts, hidden, inter, b_w, b_act, gated=w1[1] == 2 * inter)
    dtype = "int4" if packed else PEAK_KEY.get(t[1])
    return OpCost("shaped", "moe", dtype, tokens * top_k, flops, nbytes, inter, hidden)


def _attention(s: list[Shape | None], t: list[str], heads_first: bool) -> OpCost:
    """q, k, v at positions 0–2: [B,H,S,D] (SDPA) or [B,S,H,D] (`_flash_attention_forward`)."""
    got = _shapes(s, 0, 1, 2, ndim=4)
    if got is None:
        return MALFORMED
    q, k, v = got
    if heads_first:
        (b, h, sq, d), (bk, hk, sk, dk) = q, k
    else:
        (b, sq, h, d), (bk, sk, hk, dk) = q, k
    if b != bk or d != dk or k != v or hk == 0 or h % hk:
        return MALFORMED
    b_elem = _b(t[0])
    if b_elem is None or t[0] != t[1]:
        return UNSUPPORTED
    flops, nbytes = attention_cost(b, h, sq, sk, d, hk, b_elem)
    return OpCost("shaped", "attention", PEAK_KEY.get(t[0]), None, flops, nbytes)


def _paged_attention(s: list[Shape | None], t: list[str]) -> OpCost:
    """Paged attention: q [T,H,D] at 0 and the KV (new tokens or the paged cache) [*, H_kv, D] at 1 — vLLM
    `vllm::unified_attention_with_output(q, k, v, out, ...)` and aiter `aiter::mha_batch_prefill(q, k_cache,
    v_cache, ...)` (both seen in the shared traces). Sized per step from the step's length sums ("lengths")."""
    got = _shapes(s, 0, 1, ndim=3)
    if got is None:
        return MALFORMED
    (tokens, heads, d), (_, kv_heads, dk) = got
    b_q, b_kv = _b(t[0]), _b(t[1])
    if d != dk or kv_heads == 0 or heads % kv_heads:
        return MALFORMED
    if b_q is None or b_kv is None:
        return UNSUPPORTED
    attn = AttnShape(tokens, heads, kv_heads, d, b_q, b_kv)
    return OpCost("lengths", "attention", PEAK_KEY.get(t[0]), attn=attn)


def _sum_inputs(model: str) -> Model:
    """Ops whose tensor inputs are each read or written once (the output passed in: `_C::rms_norm(out, in, w)`,
    `_C::silu_and_mul(out, in)`, `aiter::add_rmsnorm(out, in, res_in, res_out, w)`, `_C::rotary_embedding(pos, q,
    k, head, cos_sin)`, `_C::static_scaled_fp8_quant(out, in, scale)`): bytes = Σ tensor inputs."""
    def cost(s: list[Shape | None], t: list[str]) -> OpCost:
        parts = _tensor_bytes(s, t)
        if not parts:
            return UNSUPPORTED
        flops, nbytes = bytes_cost(parts, ())
        return OpCost("shaped", model, None, None, flops, nbytes)
    return cost


def _fused_add_rms_norm(s: list[Shape | None], t: list[str]) -> OpCost:
    """vLLM `_C::fused_add_rms_norm(input, residual, weight)`, in place: input and residual read and written."""
    parts = _tensor_bytes(s[:3], t[:3])
    if not parts or len(parts) != 3:
        return UNSUPPORTED
    flops, nbytes = bytes_cost(parts, parts[:2])
    return OpCost("shaped", "norm", None, None, flops, nbytes)


def _layer_norm(s: list[Shape | None], t: list[str]) -> OpCost:
    """`aten::native_layer_norm(input, normalized_shape, weight, bias)`: input, weight, bias read, output written."""
    parts = _tensor_bytes(s, t)
    if not parts or s[0] is None:
        return UNSUPPORTED
    flops, nbytes = bytes_cost(parts, [parts[0]])
    return OpCost("shaped", "norm", None, None, flops, nbytes)


def _elementwise(model: str) -> Model:
    """Tensor inputs of one shape (no broadcast): each read once, one output of the first's shape written
    (`aten::add`, `aten::mul_`, `aten::silu`, `aten::copy_(self, src)`: src read, self written)."""
    def cost(s: list[Shape | None], t: list[str]) -> OpCost:
        tensors = [(x, d) for x, d in zip(s, t, strict=True) if x is not None]
        if not tensors or len({_numel(x) for x, _ in tensors}) != 1 or any(_b(d) is None for _, d in tensors):
            return UNSUPPORTED
        first = _numel(tensors[0][0]) * (_b(tensors[0][1]) or 0.0)
        read = [_numel(x) * (_b(d) or 0.0) for x, d in tensors[1 if model == "cast" else 0:]]
        flops, nbytes = bytes_cost(read if model != "fill" else [], [first])  # fill_ only writes
        return OpCost("shaped", "cast" if model == "cast" else "elementwise", None, None, flops, nbytes)
    return cost


_MODELS: dict[str, Model] = {
    "aten::mm": lambda s, t: _mm(s, t, 0, 1), "aten::addmm": lambda s, t: _mm(s, t, 1, 2), "aten::bmm": _bmm,
    "aten::matmul": _matmul, "aten::linear": _linear, "vllm::rocm_unquantized_gemm": _linear,
    "aiter::gemm_a16w16": _linear, "_C::cutlass_scaled_mm": _cutlass_scaled_mm,
    "_C::cutlass_scaled_fp4_mm": _cutlass_scaled_fp4_mm, "sgl_kernel::cutlass_scaled_fp4_mm": _cutlass_scaled_fp4_mm,
    **{name: _fused_experts for name in ("vllm::inplace_fused_experts", "vllm::outplace_fused_experts",
                                          "sglang::inplace_fused_experts", "sglang::outplace_fused_experts")},
    "aten::_scaled_dot_product_flash_attention": lambda s, t: _attention(s, t, True),
    "aten::_scaled_dot_product_efficient_attention": lambda s, t: _attention(s, t, True),
    "aten::_scaled_dot_product_cudnn_attention": lambda s, t: _attention(s, t, True),
    "aten::scaled_dot_product_attention": lambda s, t: _attention(s, t, True),
    "aten::_flash_attention_forward": lambda s, t: _attention(s, t, False),
    "vllm::unified_attention_with_output": _paged_attention, "aiter::mha_batch_prefill": _paged_attention,
    "_C::rms_norm": _sum_inputs("norm"), "aiter::rmsnorm": _sum_inputs("norm"),
    "aiter::add_rmsnorm": _sum_inputs("norm"), "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "aten::native_layer_norm": _layer_norm, "_C::rotary_embedding": _sum_inputs("rotary"),
    "sgl_kernel::rotary_embedding": _sum_inputs("rotary"), "_C::static_scaled_fp8_quant": _sum_inputs("cast"),
    **{name: _sum_inputs("activation") for name in ("_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul",
                                                      "sgl_kernel::silu_and_mul", "sgl_kernel::gelu_and_mul")},
    **{name: _elementwise("elementwise") for name in (
        "aten::silu", "aten::gelu", "aten::relu", "aten::sigmoid", "aten::add", "aten::add_", "aten::mul",
        "aten::mul_", "aten::sub", "aten::sub_", "aten::div", "aten::div_")},
    "aten::copy_": _elementwise("cast"), "aten::fill_": _elementwise("fill"),
}
assert set(_MODELS) == SHAPED_OPS, "trace._shapes.SHAPED_OPS and the cost models must name the same ops"


@lru_cache(maxsize=8192)  # one op shape repeats once per layer and step
def op_cost(name: str, dims_json: str | None, types_json: str | None) -> OpCost:
    """FLOPs and bytes of one op from its raw `Input Dims` / `Input type` JSON (see the module docstring)."""
    model = _MODELS.get(name)
    if model is None:
        return OpCost("no_model")
    if not dims_json:
        return OpCost("no_dims")
    try:
        shapes, types = parse_inputs(dims_json, types_json)
    except _Malformed:
        return MALFORMED
    if len(types) > len(shapes):
        types = types[: len(shapes)]
    return model(shapes, types)
