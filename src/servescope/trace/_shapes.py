"""Message size of custom all-reduce ops from their record_shapes args (`Input Dims`, `Input type`).

What it does: `is_custom_all_reduce` tells the engine/torch all-reduce ops that launch a communication
kernel but carry no `In msg nelems` (only `record_param_comms` does); `first_tensor` reads, from the raw
JSON of such an op's `Input Dims` and `Input type`, the element count and dtype of its first tensor
input — the buffer being all-reduced, so in = out = the nccl-tests "size" (bytes = count × dtype size,
computed in `classify`).
Op names and signatures (first tensor input):
- `vllm::all_reduce(Tensor tensor, str group_name)`, `symm_mem::multimem_all_reduce_(Tensor input,
  str reduce_op, str group_name)`: seen in traces/tracelens/b200/eager_trace.json.gz (Input Dims
  [[888, 2880], []] and [[2557440], [], []], both c10::BFloat16).
- `_C_custom_ar::all_reduce(int fa, Tensor inp, Tensor! out, int reg_buffer, int reg_sz_bytes)` (vLLM
  csrc/torch_bindings.cpp) and `sgl_kernel::all_reduce` (same signature, sgl-kernel), and the
  `{vllm,sglang}::{inplace,outplace}_all_reduce` custom ops: from the engines' sources, not seen in a
  trace here. Their first input is an int handle (`Input type` "Scalar"), hence "first tensor".
`SHAPED_OPS` names the ops whose `Input Dims` / `Input type` the loader keeps as JSON text (columns
`op_input_dims`, `op_input_types`) for the per-kernel cost models of `servescope.analysis.op_costs` (GEMMs,
attention, MoE experts, norms, activations, rotary, elementwise, casts); `is_shaped_op` tests a name.
What it does not do: decode anything for other ops (the Raw slices of all other events are dropped
unread with their chunk), size the shaped ops (analysis.roofline does, once per distinct shape), or know
the group size (these ops carry none).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from typing import Any

import msgspec

# Namespaces of engine / torch symmetric-memory all-reduce ops (see the module docstring).
_CUSTOM_ALL_REDUCE = re.compile(
    r"^(?:vllm|symm_mem|_C_custom_ar|sgl_kernel|sglang)::\w*all_?reduce", re.IGNORECASE
)
BAD_SHAPES = "args.Input Dims/Input type of custom all-reduce ops"
_NOT_TENSOR_TYPES = ("", "Scalar", "ScalarList", "TensorList", "GenericList", "None")
# Ops whose record_shapes args are kept for the cost models (analysis.op_costs maps each to a model; a name
# here that has no model there would only cost memory: tests/analysis/test_roofline.py checks both ways).
SHAPED_OPS: frozenset[str] = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
    "vllm::rocm_unquantized_gemm", "aiter::gemm_a16w16", "_C::cutlass_scaled_mm",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::scaled_dot_product_attention",
    "aten::_flash_attention_forward",
    "_C::rms_norm", "_C::fused_add_rms_norm", "aiter::rmsnorm", "aiter::add_rmsnorm", "aten::native_layer_norm",
    "_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "sgl_kernel::silu_and_mul",
    "sgl_kernel::gelu_and_mul", "aten::silu", "aten::gelu", "aten::relu", "aten::sigmoid",
    "aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::sub", "aten::sub_", "aten::div", "aten::div_",
    "aten::copy_", "aten::fill_",
    # analysis.op_costs: paged attention (sized per step), rotary / FP8 quant bytes, NVFP4 GEMMs, fused MoE experts
    "vllm::unified_attention_with_output", "aiter::mha_batch_prefill", "_C::rotary_embedding",
    "sgl_kernel::rotary_embedding", "_C::static_scaled_fp8_quant", "_C::cutlass_scaled_fp4_mm",
    "sgl_kernel::cutlass_scaled_fp4_mm", "vllm::inplace_fused_experts", "vllm::outplace_fused_experts",
    "sglang::inplace_fused_experts", "sglang::outplace_fused_experts",
})


@functools.lru_cache(maxsize=4096)  # names repeat across chunks
def is_custom_all_reduce(name: object) -> bool:
    """Whether an op name is a custom / symmetric-memory all-reduce op (`vllm::all_reduce`, ...)."""
    return isinstance(name, str) and _CUSTOM_ALL_REDUCE.match(name) is not None


def is_shaped_op(name: object) -> bool:
    """Whether the loader keeps this op's `Input Dims` / `Input type` (see `SHAPED_OPS`)."""
    return name in SHAPED_OPS


def raw_text(raw: msgspec.Raw) -> str | None:
    """The raw JSON of an arg as text (None when absent); an undecodable byte becomes U+FFFD."""
    return bytes(raw).decode("utf-8", "replace") if raw else None


def first_tensor(
    dims_raw: msgspec.Raw, types_raw: msgspec.Raw, lost: Counter[str]
) -> tuple[int | None, str | None]:
    """(element count, dtype) of the first tensor input: the first position whose `Input type` is a
    non-empty dtype name (not Scalar/ScalarList/...) and whose `Input Dims` entry is a list of
    non-negative ints; the count is the product of those dims (a 0-d tensor counts 1). (None, None)
    when record_shapes was off (both args absent). Malformed args (not lists, strings, nested lists,
    negative or non-int dims, no tensor input) give (None, None) and are counted into `lost[BAD_SHAPES]`
    (a load warning). A count beyond int64 is returned as is; the frame's cast nulls and counts it."""
    if not dims_raw and not types_raw:
        return None, None
    count, dtype = _parse(bytes(dims_raw), bytes(types_raw))
    if dtype is None:
        lost[BAD_SHAPES] += 1
    return count, dtype


@functools.lru_cache(maxsize=1024)  # the same few shapes repeat once per layer and step
def _parse(dims_json: bytes, types_json: bytes) -> tuple[int | None, str | None]:
    try:
        dims: Any = msgspec.json.decode(dims_json) if dims_json else None
        types: Any = msgspec.json.decode(types_json) if types_json else None
    except (msgspec.DecodeError, RecursionError):
        return None, None
    if isinstance(dims, list) and isinstance(types, list):
        for shape, dtype in zip(dims, types, strict=False):
            if _is_dtype(dtype) and _is_shape(shape):
                return math.prod(shape), dtype
    return None, None


def _is_dtype(value: object) -> bool:
    return isinstance(value, str) and value not in _NOT_TENSOR_TYPES


def _is_shape(value: object) -> bool:
    return isinstance(value, list) and all(type(d) is int and d >= 0 for d in value)
