"""The datasheet roofline of each measured op, in the op's own shape variables: how a curve extends past its grid.

What it does: for one GPU system and one looked-up shape, a function (x, a) → seconds, x the curve's inner axis and a
its outer one (GEMM: M; decode attention and MLA: kv_len, batch; prefill attention: isl, batch; MoE: tokens):
    t(x, a) = max(bytes(x, a) / datasheet HBM BW, FLOPs(x, a) / datasheet peak of the op's dtype)      [s]
with the fixed parts kept (a GEMM's weight read does not grow with M; a decode step's query read is per sequence).
opcurve.py extends a measured curve beyond its last measured point by t(x, a) / t(edge), so the extension scales
the way the op's bytes and FLOPs do from that edge — never by the curve's own last slope.
Bytes and FLOPs (element bytes: weights by dtype, activations and outputs 2 B, KV by the KV dtype):
    GEMM           N·K·w + M·(K + N)·2                 ; 2·M·N·K
    decode attn    a·(x·2·kvh·d·kv + 2·h·d·2)           ; 4·a·h·d·x
    prefill attn   a·x·(2·h + 2·kvh)·d·2                ; 2·a·h·d·x²            (causal: half of 4·h·d·x²)
    MLA decode     a·(x·576·kv + 2·h·576·2)             ; a·x·h·2·(576 + 512)   (DeepSeek-V3 latent 512 + rope 64)
    MLA prefill    a·x·h·(192 + 192 + 128 + 128)·2      ; a·x²·h·(192 + 128)    (causal, qk 192, v 128 per head)
    MLA module     + DeepSeek-V3's projection weights per GPU (q_a, kv_a replicated; q_b, kv_b, o by head) read once,
                   and 2 FLOPs per weight per token
    MoE            min(E/ep, x·topk)·3·H·I/tp·w + x·H·2·2 ; 2·3·x·topk·H·I/tp/ep  (gated experts)
What it does not: price anything in the step (the model's own roofline, with its efficiencies, is step.py's), or
bound the curves (measured_ops.py does, against the model's roofline).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from servescope.perfmodel.ops import peak_flops
from servescope.specs.hardware import GpuSpec, load_gpu

Array = npt.NDArray[np.float64]
Roof = Callable[[Array, Array], Array]

# element bytes of a measured table's dtype names
_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5625, "int4_wo": 0.5, "int8_wo": 1.0,
          "w4a16_mxfp4": 0.53125, "float16": 2.0}
_PEAK = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int8_wo": "int8"}
_LATENT, _LORA, _QK, _V = 576.0, 512.0, 192.0, 128.0          # DeepSeek-V3 MLA dims
_V3_HIDDEN, _V3_QLORA = 7168.0, 1536.0


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a table dtype name (unknown: 2, a 16-bit element)."""
    return _BYTES.get(dtype, 2.0)


@lru_cache(maxsize=64)
def _gpu(system: str) -> tuple[float, GpuSpec]:
    g = load_gpu(system)
    return float(g.hbm_bw_bytes_per_s), g


def _peak(system: str, dtype: str) -> float:
    return peak_flops(_gpu(system)[1], _PEAK.get(dtype, "bf16"))


def gemm(system: str, n: int, k: int, dtype: str) -> Roof:
    """Roofline of C[M, N] = A[M, K]·B[K, N] vs M (x); `a` is unused."""
    bw, peak, w = _gpu(system)[0], _peak(system, dtype), dtype_bytes(dtype)
    return lambda x, a: np.maximum((n * k * w + x * (k + n) * 2.0) / bw, 2.0 * x * n * k / peak)


def decode_attention(system: str, heads: int, kv_heads: int, head_dim: int, kv_dtype: str) -> Roof:
    """Roofline of one decode attention layer vs kv_len (x) and batch (a)."""
    bw, peak, kv = _gpu(system)[0], _peak(system, "bfloat16"), dtype_bytes(kv_dtype)
    return lambda x, a: np.maximum(a * (x * 2.0 * kv_heads * head_dim * kv + 4.0 * heads * head_dim) / bw,
                                   4.0 * a * heads * head_dim * x / peak)


def context_attention(system: str, heads: int, kv_heads: int, head_dim: int) -> Roof:
    """Roofline of one prefill attention layer (no cached prefix) vs isl (x) and batch (a)."""
    bw, peak = _gpu(system)[0], _peak(system, "bfloat16")
    return lambda x, a: np.maximum(a * x * (2.0 * heads + 2.0 * kv_heads) * head_dim * 2.0 / bw,
                                   2.0 * a * heads * head_dim * x * x / peak)


def _v3_weights(heads: int) -> float:
    """DeepSeek-V3 MLA block weights (parameters) per GPU with `heads` query heads on it."""
    return _V3_HIDDEN * (_V3_QLORA + _LATENT) + _V3_QLORA * heads * _QK + _LORA * heads * 256.0 \
        + heads * _V * _V3_HIDDEN


def mla(system: str, phase: str, heads: int, kv_dtype: str, module: bool = False, gemm_dtype: str = "bfloat16",
        ) -> Roof:
    """Roofline of one MLA layer (kernel alone, or the whole block when `module`) vs kv_len/isl (x) and batch (a)."""
    bw, peak, kv = _gpu(system)[0], _peak(system, "bfloat16"), dtype_bytes(kv_dtype)
    wp = _v3_weights(heads) if module else 0.0
    wb, wpeak = wp * dtype_bytes(gemm_dtype), _peak(system, gemm_dtype)
    if phase == "generation":
        return lambda x, a: np.maximum((wb + a * (x * _LATENT * kv + 4.0 * heads * _LATENT)) / bw,
                                       a * x * heads * 2.0 * (_LATENT + _LORA) / peak + 2.0 * a * wp / wpeak)
    return lambda x, a: np.maximum((wb + a * x * heads * 2.0 * (_QK + _V) * 2.0) / bw,
                                   a * x * x * heads * (_QK + _V) / peak + 2.0 * a * x * wp / wpeak)


def moe(system: str, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int, dtype: str) -> Roof:
    """Roofline of one MoE layer's routed experts on one GPU vs tokens per step (x); `a` is unused."""
    bw, peak, w = _gpu(system)[0], _peak(system, dtype), dtype_bytes(dtype)
    per_expert = 3.0 * hidden * inter / tp
    return lambda x, a: np.maximum((np.minimum(experts / ep, x * topk) * per_expert * w + 4.0 * x * hidden) / bw,
                                   2.0 * x * topk * per_expert / ep / peak)
