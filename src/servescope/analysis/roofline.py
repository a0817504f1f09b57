"""Per-kernel work from the launching op's shapes, and the roofline of that work (issue 19 parts 1–3).

What it does:
- cost models (pure functions, formula and units in each docstring): dense GEMM by dtype, INT4 W4A16 GEMM,
  attention (prefill FLOPs, decode KV bytes), bytes-only ops (norm, activation, elementwise, cast, memcpy);
- `op_cost(name, dims_json, types_json)`: one op's FLOPs and bytes from its raw `Input Dims` / `Input type`
  (kept by the loader for `trace._shapes.SHAPED_OPS`), or why it has none — conservative: an op whose layout
  this module cannot read is "unsupported", malformed dims are "malformed", never a guess;
- `attach_work(events, gpu)`: each GPU row's launching op (correlation → launch → `External id` → the cpu_op
  with that id whose interval holds the launch; else the kernel's own `External id`), its work and a
  `shape_status` (`SHAPE_STATUSES`); an op that launched several kernels splits its work over them in
  proportion to their durations; memcpy/memset rows carry their own `args.bytes`;
- `Peaks` (datasheet ceilings, given by the caller: analysis never reads specs) and `roofline(groups, peaks)`:
  achieved FLOP/s and B/s, % of peak, the bound, % of the measured achievable; `waves`, `tail_efficiency`.
What it does not do: read files or specs, price MoE / MLA / sparse attention / quantized custom ops (no shape),
or format anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import polars as pl

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
MAX_DIM = 1 << 40  # a larger dim is damage, not a tensor
SHAPE_STATUSES = ("shaped", "no_op", "no_model", "no_dims", "malformed", "unsupported")
SHAPE_STATUS_TEXT = {
    "no_op": "no launching op (graph replay or no linkage)", "no_model": "op without a cost model",
    "no_dims": "no Input Dims (record_shapes off)", "malformed": "malformed Input Dims",
    "unsupported": "layout not sized (broadcast, packed or unknown dtype)",
}
BYTES_ONLY_MODELS = ("norm", "activation", "elementwise", "cast", "memcpy", "memset")


# ------------------------------------------------------------------------------------------------ cost models
def gemm_cost(m: int, n: int, k: int, b_in: float, b_out: float, batch: int = 1) -> tuple[float, float]:
    """Dense GEMM [M,K]×[K,N] (× batch): FLOPs = 2·batch·M·N·K; bytes = batch·((M·K + K·N)·b_in + M·N·b_out),
    b = bytes per element (BF16 2, FP8 1, FP4 0.5). Each operand read once and C written once (no bias, no scales)."""
    return 2.0 * batch * m * n * k, float(batch) * ((m * k + k * n) * b_in + m * n * b_out)


def w4a16_gemm_cost(m: int, n: int, k: int, group_size: int, b_act: float = 2.0,
                    b_scale: float = 2.0) -> tuple[float, float]:
    """INT4 W4A16 GEMM: FLOPs = 2·M·N·K; bytes = M·K·b_act + K·N·0.5 (packed weights) + (K/group)·N·b_scale
    (group scales) + M·N·b_act (output). Zero points, if any, are not counted."""
    return 2.0 * m * n * k, m * k * b_act + k * n * 0.5 + math.ceil(k / group_size) * n * b_scale + m * n * b_act


def attention_cost(batch: int, heads: int, s_q: int, s_k: int, d: int, kv_heads: int,
                   b_elem: float) -> tuple[float, float]:
    """Attention: FLOPs = 4·B·H·S_q·S_k·D (QKᵀ and PV, the full score matrix: no causal discount); bytes = Q and O
    (B·H·S_q·D each) + K and V read once (B·H_kv·S_k·D each), × b_elem. Decode (S_q = 1) is the KV read."""
    return (4.0 * batch * heads * s_q * s_k * d,
            float(b_elem) * (2 * batch * heads * s_q * d + 2 * batch * kv_heads * s_k * d))


def bytes_cost(read: Iterable[float], written: Iterable[float]) -> tuple[float, float]:
    """Bytes-only ops (norm, activation, elementwise, cast, memcpy): FLOPs counted as 0; bytes = Σ bytes read +
    Σ bytes written, each tensor once (no cache reuse, no re-reads)."""
    return 0.0, float(sum(read)) + float(sum(written))


# ------------------------------------------------------------------------------------------------ op → cost
@dataclass(frozen=True)
class OpCost:
    """One op's work: `status` is `shaped`, `malformed` or `unsupported`; FLOPs and bytes when shaped."""

    status: str
    model: str | None = None
    dtype: str | None = None  # peak key (bf16, fp8, fp32, ...), None for bytes-only ops
    m: int | None = None  # GEMM rows (for measured curves), None otherwise
    flops: float | None = None
    bytes: float | None = None


MALFORMED = OpCost("malformed")
UNSUPPORTED = OpCost("unsupported")
Shape = tuple[int, ...]


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


def _gemm(m: int, n: int, k: int, dt_a: str, dt_b: str, batch: int = 1, dt_out: str | None = None) -> OpCost:
    b_a, b_w, b_o = _b(dt_a), _b(dt_b), _b(dt_out or dt_a)
    if b_a is None or b_w is None or b_o is None or dt_a != dt_b or dt_a == "c10::Float4_e2m1fn_x2":
        return UNSUPPORTED  # mixed or packed operands: this model does not size them
    flops, nbytes = gemm_cost(m, n, k, b_a, b_o, batch)
    return OpCost("shaped", "gemm", PEAK_KEY.get(dt_a), m * batch, flops, nbytes)


def _mm(s: list[Shape | None], t: list[str], a: int, b: int) -> OpCost:
    """[M,K] @ [K,N] at positions a, b."""
    if len(s) <= max(a, b) or s[a] is None or s[b] is None:
        return MALFORMED
    x, w = s[a], s[b]
    assert x is not None and w is not None
    if len(x) != 2 or len(w) != 2:
        return MALFORMED
    (m, k), (k2, n) = x, w
    return _gemm(m, n, k, t[a], t[b]) if k == k2 else MALFORMED


def _linear(s: list[Shape | None], t: list[str]) -> OpCost:
    """input [.., K] with weight [N, K] (M = Π leading dims)."""
    if len(s) < 2 or s[0] is None or s[1] is None:
        return MALFORMED
    x, w = s[0], s[1]
    assert x is not None and w is not None
    if len(w) != 2 or len(x) < 1 or x[-1] != w[1]:
        return MALFORMED
    return _gemm(_numel(x[:-1]), w[0], x[-1], t[0], t[1])


def _bmm(s: list[Shape | None], t: list[str]) -> OpCost:
    if len(s) < 2 or s[0] is None or s[1] is None:
        return MALFORMED
    x, w = s[0], s[1]
    assert x is not None and w is not None
    if len(x) != 3 or len(w) != 3 or x[0] != w[0] or x[2] != w[1]:
        return MALFORMED
    return _gemm(x[1], w[2], x[2], t[0], t[1], batch=x[0])


def _matmul(s: list[Shape | None], t: list[str]) -> OpCost:
    """[.., K] @ [K, N] (a 2-d weight), or [B,M,K] @ [B,K,N]; any other broadcast is unsupported."""
    if len(s) < 2 or s[0] is None or s[1] is None:
        return MALFORMED
    x, w = s[0], s[1]
    assert x is not None and w is not None
    if len(w) == 2 and len(x) >= 1:
        return _gemm(_numel(x[:-1]), w[1], x[-1], t[0], t[1]) if x[-1] == w[0] else MALFORMED
    if len(x) == 3 and len(w) == 3 and x[0] == w[0]:
        return _bmm(s, t)
    return UNSUPPORTED


def _cutlass_scaled_mm(s: list[Shape | None], t: list[str]) -> OpCost:
    """vLLM `_C::cutlass_scaled_mm(out [M,N], a [M,K], b [K,N], a_scales, b_scales, bias)`; scales not counted."""
    if len(s) < 3 or s[0] is None or s[1] is None or s[2] is None:
        return MALFORMED
    o, x, w = s[0], s[1], s[2]
    assert o is not None and x is not None and w is not None
    if len(o) != 2 or len(x) != 2 or len(w) != 2 or x[1] != w[0] or o != (x[0], w[1]):
        return MALFORMED
    return _gemm(x[0], w[1], x[1], t[1], t[2], dt_out=t[0])


def _attention(s: list[Shape | None], t: list[str], heads_first: bool) -> OpCost:
    """q, k, v at positions 0–2: [B,H,S,D] (SDPA) or [B,S,H,D] (`_flash_attention_forward`)."""
    if len(s) < 3 or any(x is None or len(x) != 4 for x in s[:3]):
        return MALFORMED
    q, k, v = s[0], s[1], s[2]
    assert q is not None and k is not None and v is not None
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


def _sum_inputs(model: str) -> Callable[[list[Shape | None], list[str]], OpCost]:
    """Ops whose tensor inputs are each read or written once (the output passed in: `_C::rms_norm(out, in, w)`,
    `_C::silu_and_mul(out, in)`, `aiter::add_rmsnorm(out, in, res_in, res_out, w)`): bytes = Σ tensor inputs."""
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


def _elementwise(model: str) -> Callable[[list[Shape | None], list[str]], OpCost]:
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


_MODELS: dict[str, Callable[[list[Shape | None], list[str]], OpCost]] = {
    "aten::mm": lambda s, t: _mm(s, t, 0, 1), "aten::addmm": lambda s, t: _mm(s, t, 1, 2), "aten::bmm": _bmm,
    "aten::matmul": _matmul, "aten::linear": _linear, "vllm::rocm_unquantized_gemm": _linear,
    "aiter::gemm_a16w16": _linear, "_C::cutlass_scaled_mm": _cutlass_scaled_mm,
    "aten::_scaled_dot_product_flash_attention": lambda s, t: _attention(s, t, True),
    "aten::_scaled_dot_product_efficient_attention": lambda s, t: _attention(s, t, True),
    "aten::_scaled_dot_product_cudnn_attention": lambda s, t: _attention(s, t, True),
    "aten::scaled_dot_product_attention": lambda s, t: _attention(s, t, True),
    "aten::_flash_attention_forward": lambda s, t: _attention(s, t, False),
    "_C::rms_norm": _sum_inputs("norm"), "aiter::rmsnorm": _sum_inputs("norm"),
    "aiter::add_rmsnorm": _sum_inputs("norm"), "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "aten::native_layer_norm": _layer_norm,
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


# ------------------------------------------------------------------------------------------------ linkage
WORK_COLUMNS: dict[str, Any] = {
    "shape_status": pl.Utf8, "work_model": pl.Utf8, "work_dtype": pl.Utf8, "work_m": pl.Int64,
    "work_flops": pl.Float64, "work_bytes": pl.Float64,
}
_NEEDED = {"external_id": pl.Int64, "correlation": pl.Int64, "op_input_dims": pl.Utf8, "op_input_types": pl.Utf8,
           "gpu_bytes": pl.Int64, "ts_us": pl.Float64, "dur_us": pl.Float64}


def attach_work(events: pl.DataFrame, gpu: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """`gpu` (GPU rows of `events`) with `WORK_COLUMNS`: each row's share of its launching op's work (see the module
    docstring) and its `shape_status`; and warnings (malformed `Input Dims`, counted)."""
    def fill(f: pl.DataFrame) -> pl.DataFrame:
        return f.with_columns(pl.lit(None, d).alias(c) for c, d in _NEEDED.items() if c not in f.columns)
    ev, g = fill(events), fill(gpu.drop([c for c in WORK_COLUMNS if c in gpu.columns]))
    launches = (ev.lazy().filter(pl.col("kind").is_in(("runtime", "driver")) & pl.col("correlation").is_not_null())
                .select("correlation", pl.col("external_id").alias("_launch_ext"), pl.col("ts_us").alias("_launch_ts"))
                .unique("correlation", keep="first", maintain_order=True).collect())
    ops = (ev.lazy().filter((pl.col("kind") == "cpu_op") & pl.col("external_id").is_not_null())
           .select(pl.col("external_id").alias("_op_id"), pl.col("name").alias("_op_name"),
                   pl.col("ts_us").alias("_op_ts"), (pl.col("ts_us") + pl.col("dur_us")).alias("_op_end"),
                   pl.col("op_input_dims").alias("_dims"), pl.col("op_input_types").alias("_types"))
           .unique("_op_id", keep="first", maintain_order=True).collect())
    linked = (g.with_row_index("_row").join(launches, on="correlation", how="left", maintain_order="left")
              .with_columns(pl.coalesce("_launch_ext", "external_id").alias("_op_id"))
              .join(ops, on="_op_id", how="left", maintain_order="left"))
    held = pl.col("_launch_ts").is_null() | ((pl.col("_op_ts") <= pl.col("_launch_ts"))
                                             & (pl.col("_launch_ts") <= pl.col("_op_end")))
    linked = linked.with_columns(pl.when(held).then(pl.col("_op_name")).alias("_op_name"))
    keys = linked.filter(pl.col("_op_name").is_not_null()).select("_op_name", "_dims", "_types").unique()
    costs = [op_cost(n, d, t) for n, d, t in keys.iter_rows()]
    table = keys.with_columns(
        pl.Series("_status", [c.status for c in costs], pl.Utf8), pl.Series("_model", [c.model for c in costs], pl.Utf8),
        pl.Series("_dtype", [c.dtype for c in costs], pl.Utf8), pl.Series("_m", [c.m for c in costs], pl.Int64),
        pl.Series("_flops", [c.flops for c in costs], pl.Float64),
        pl.Series("_bytes", [c.bytes for c in costs], pl.Float64))
    linked = linked.join(table, on=["_op_name", "_dims", "_types"], how="left", maintain_order="left", nulls_equal=True)
    is_kernel = pl.col("kind") == "kernel"
    shaped_kernel = is_kernel & (pl.col("_status") == "shaped")
    op_dur = pl.col("dur_us").filter(is_kernel).sum().over("_op_id")
    op_n = is_kernel.sum().over("_op_id")
    share = pl.when(op_dur > 0).then(pl.col("dur_us") / op_dur).otherwise(1.0 / op_n)
    copy = pl.col("kind").is_in(("memcpy", "memset"))
    linked = linked.with_columns(
        pl.when(shaped_kernel).then(share).alias("_share")
    ).with_columns(
        pl.when(copy).then(pl.when(pl.col("gpu_bytes").is_not_null()).then(pl.lit("shaped")).otherwise(pl.lit("no_dims")))
        .when(pl.col("_op_name").is_null()).then(pl.lit("no_op"))
        .otherwise(pl.col("_status")).alias("shape_status"),
        pl.when(copy).then(pl.col("kind")).when(shaped_kernel).then(pl.col("_model")).alias("work_model"),
        pl.when(shaped_kernel).then(pl.col("_dtype")).alias("work_dtype"),
        pl.when(shaped_kernel).then(pl.col("_m")).alias("work_m"),
        pl.when(copy & pl.col("gpu_bytes").is_not_null()).then(pl.lit(0.0))
        .when(shaped_kernel).then(pl.col("_flops") * pl.col("_share")).alias("work_flops"),
        pl.when(copy).then(pl.col("gpu_bytes").cast(pl.Float64))
        .when(shaped_kernel).then(pl.col("_bytes") * pl.col("_share")).alias("work_bytes"),
    )
    # A shaped op's share is split over its kernels only (a row of another kind keeps "shaped" out).
    linked = linked.with_columns(pl.when(~copy & ~is_kernel & (pl.col("shape_status") == "shaped"))
                                 .then(pl.lit("no_model")).otherwise(pl.col("shape_status")).alias("shape_status"))
    out = linked.sort("_row").select(*gpu.drop([c for c in WORK_COLUMNS if c in gpu.columns]).columns, *WORK_COLUMNS)
    bad = linked.filter(pl.col("shape_status") == "malformed")
    warnings = []
    if bad.height:
        warnings.append(f"{bad.height:,} kernels ({bad['dur_us'].sum():,.1f} µs) launched by "
                        f"{bad['_op_id'].n_unique():,} ops with malformed Input Dims (wrong nesting, strings, "
                        "negative or huge dims) carry no shape")
    return out.cast({c: d for c, d in WORK_COLUMNS.items()}), warnings


# ------------------------------------------------------------------------------------------------ aggregates
@dataclass(frozen=True)
class WorkGroup:
    """Shaped GPU work of one (class, model, dtype, M): calls, summed kernel µs, FLOPs and bytes."""

    kernel_class: str
    model: str
    dtype: str | None
    m: int | None
    calls: int
    dur_us: float
    flops: float
    bytes: float


def work_groups(gpu: pl.DataFrame, by: list[str]) -> dict[tuple[Any, ...], tuple[WorkGroup, ...]]:
    """Shaped rows of `gpu` (with `attach_work`'s columns) per value of the `by` columns, as WorkGroups."""
    shaped = gpu.filter(pl.col("shape_status") == "shaped")
    stats = (shaped.group_by(*by, "kernel_class", "work_model", "work_dtype", "work_m")
             .agg(pl.len().alias("calls"), pl.col("dur_us").sum().alias("dur"), pl.col("work_flops").sum().alias("f"),
                  pl.col("work_bytes").sum().alias("b"))
             .sort(*by, "kernel_class", "work_model", "work_dtype", "work_m", nulls_last=True))
    out: dict[tuple[Any, ...], list[WorkGroup]] = {}
    for r in stats.iter_rows(named=True):
        out.setdefault(tuple(r[c] for c in by), []).append(WorkGroup(
            r["kernel_class"] or "other", r["work_model"], r["work_dtype"], r["work_m"], int(r["calls"]),
            float(r["dur"]), float(r["f"]), float(r["b"])))
    return {k: tuple(v) for k, v in out.items()}


def unshaped_us(gpu: pl.DataFrame, by: list[str]) -> dict[tuple[Any, ...], dict[str, float]]:
    """Summed µs of the GPU rows without a shape, per value of `by`, by `shape_status` reason."""
    stats = (gpu.filter(pl.col("shape_status") != "shaped").group_by(*by, "shape_status")
             .agg(pl.col("dur_us").sum()).sort(*by, "shape_status"))
    out: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in stats.iter_rows(named=True):
        out.setdefault(tuple(r[c] for c in by), {})[r["shape_status"]] = float(r["dur_us"])
    return out


# ------------------------------------------------------------------------------------------------ roofline
@dataclass(frozen=True)
class Peaks:
    """Datasheet ceilings of one GPU, SI: dense FLOP/s by dtype key (bf16, fp8, fp4, int8), HBM bytes/s, SMs;
    `source` says where they came from. `gemm_ratio(M)`: a measured dense-GEMM curve (time ÷ datasheet roofline
    at M rows, ≥ 1), None when no curve was measured for this GPU."""

    name: str
    flops_per_s: Mapping[str, float]
    hbm_bw_bytes_per_s: float
    sm_count: int | None
    source: str
    gemm_ratio: Callable[[float], float] | None = None
    gemm_curve_source: str | None = None

    def ridge_flops_per_byte(self, dtype: str) -> float | None:
        """Ridge point = peak FLOP/s ÷ HBM B/s (FLOP/byte); None without a peak for the dtype."""
        peak = self.flops_per_s.get(dtype) or 0.0
        return peak / self.hbm_bw_bytes_per_s if peak > 0 and self.hbm_bw_bytes_per_s > 0 else None


@dataclass(frozen=True)
class Roofline:
    """Achieved rates of some shaped work and where it sits against the peaks (fractions are 0–1+, not %)."""

    flops: float
    bytes: float
    dur_us: float
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    intensity_flops_per_byte: float | None
    frac_of_peak: float | None  # roofline time (datasheet) ÷ measured time
    bound: str | None  # "compute" | "memory"
    frac_of_achievable: float | None  # measured-curve time ÷ measured time (dense GEMMs only)


def roofline(groups: Iterable[WorkGroup], peaks: Peaks | None) -> Roofline | None:
    """Achieved FLOP/s = Σ FLOPs ÷ Σ kernel s; B/s likewise; % of peak = Σ max(F/peak_dtype, B/HBM) ÷ Σ kernel s
    (the datasheet roofline time over the measured time); bound = compute where Σ F/peak ≥ Σ B/HBM (intensity
    above the ridge), else memory; % of achievable (dense GEMMs with a measured curve) = Σ roofline·ratio(M) ÷ Σ s.
    None when there is no shaped work; peak-based fields None without peaks or a peak for a dtype."""
    gs = [g for g in groups if g.dur_us > 0]
    if not gs:
        return None
    flops, nbytes, dur_s = sum(g.flops for g in gs), sum(g.bytes for g in gs), sum(g.dur_us for g in gs) * 1e-6
    ai = flops / nbytes if nbytes > 0 else None
    frac = bound = achievable = None
    if peaks is not None and peaks.hbm_bw_bytes_per_s > 0:
        t_comp = t_mem = t_roof = 0.0
        ok = True
        for g in gs:
            peak = peaks.flops_per_s.get(g.dtype or "") or 0.0 if g.flops > 0 else None
            if peak is not None and peak <= 0:
                ok = False
                break
            c = g.flops / peak if peak else 0.0
            m = g.bytes / peaks.hbm_bw_bytes_per_s
            t_comp, t_mem, t_roof = t_comp + c, t_mem + m, t_roof + max(c, m)
        if ok:
            frac, bound = t_roof / dur_s, "compute" if t_comp >= t_mem else "memory"
            if peaks.gemm_ratio is not None and all(g.model == "gemm" and g.m for g in gs):
                achievable = sum(
                    max(g.flops / (peaks.flops_per_s.get(g.dtype or "") or math.inf), g.bytes / peaks.hbm_bw_bytes_per_s)
                    * peaks.gemm_ratio(float(g.m or 1)) for g in gs) / dur_s
    return Roofline(flops, nbytes, dur_s * 1e6, flops / dur_s, nbytes / dur_s, ai, frac, bound, achievable)


def waves(grid_blocks: float, sm_count: int, resident_blocks_per_sm: int = 1) -> float:
    """Waves = grid blocks ÷ (SMs × resident blocks per SM); one resident block per SM unless told (a large GEMM or
    attention tile; kernels that fit more blocks per SM run in proportionally fewer waves)."""
    return grid_blocks / (sm_count * resident_blocks_per_sm)


def tail_efficiency(n_waves: float) -> float | None:
    """Share of SM slots busy over the waves run: waves ÷ ⌈waves⌉ (1.0 for whole waves; 0.34 for 64 blocks on 188
    SMs). None for 0 waves."""
    return n_waves / math.ceil(n_waves) if n_waves > 0 else None
