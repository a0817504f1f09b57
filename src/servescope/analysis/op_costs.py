"""One traced op's FLOPs and bytes from its raw `Input Dims` / `Input type` (issue 19 parts 1–2).

What it does: `op_cost(name, dims_json, types_json)` — the op's work through the cost models of `analysis.costs`, or
why it has none — conservative: an op whose layout this module cannot read is "unsupported", malformed dims are
"malformed", never a guess. Ops are mapped only where their argument layout was seen in a shared trace or read in the
engine's op schema (each mapping names which); paged-attention ops come back "lengths" with their head layout: their
FLOPs need the step's Σ query·KV lengths (vLLM `detailed_trace_annotation`), which `roofline.attach_work` joins per
step.
What it does not do: price an op without its weights among its inputs (vLLM `moe_forward` carries only hidden states
and router logits: no expert sizes, no top-k), count zero points, or read files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from servescope.analysis.costs import (
    ELEMENT_BYTES,
    MAX_DIM,
    PACKED_4BIT,
    PEAK_KEY,
    attention_cost,
    bytes_cost,
    gemm_cost,
    moe_gemm_cost,
)
from servescope.trace import SHAPED_OPS


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
