"""FP8-stored KV cache on a GPU without a hardware FP8 conversion: the ALU time the attention kernel spends decoding
every KV element it reads back to the activation dtype.

Does: `kv_dequant(gpu, kv)` → seconds per KV element read (or why it cannot be priced). Formula and units:
    s_per_element = instructions_per_element / lane_rate            [s / element]
    lane_rate     = simt_fp32_flops / 2                             [instructions / s, all SMs; an FMA = 2 FLOPs]
  with instructions_per_element (4.5: Triton's software E4M3 → bf16 decode, 18 instructions per 4 values) and the
  GPU's non-tensor FP32 peak from specs/data/kv_dequant.toml (each with its source). It applies when the KV scheme is
  an 8-bit float (`fp8`: E4M3 or E5M2, one byte) and the GPU is an NVIDIA sm_XX below `hardware_cvt.min_sm` (89):
  from sm_89 on, cvt.rn.f16x2.e4m3x2 converts two values per instruction and the decode is not priced (0).
  perfmodel.ops adds it to the attention class's compute side per context token read (ops.py `_ctx_terms`), so
  the roofline max(KV bytes / BW, compute) decides whether it shows: a decode step at high occupancy hides it under
  the halved KV read, one whose ALU work exceeds the read pays it.
Assumptions: the integer instructions of the decode (prmt, and, shifts, lop3) issue at the FP32 lane rate (64 per
clock per SM on GA100; the INT32 lane count is not in the specs); every SM takes part (the kernel's grid fills the
GPU); the encode of the step's new KV (one write per token) is left out: it is B·t elements against the B·L read.
Does not: price the engine's choice of a different attention backend for FP8 KV (no sourced cost), or AMD GPUs
(not NVIDIA sm_XX: 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from servescope.errors import BadConfig
from servescope.specs import tables
from servescope.specs.hardware import GpuSpec
from servescope.specs.quant import QuantScheme

FILE = "kv_dequant.toml"
FP8_KV = ("fp8",)  # the one-byte float KV schemes (specs.kv_dtypes maps every engine's fp8 variant to "fp8")


@dataclass(frozen=True)
class KvDequant:
    """Seconds per KV element read (0 where the hardware converts or the KV is not FP8; None where it cannot be
    priced) and a sentence saying which case and from what."""

    s_per_element: float | None
    why: str


@lru_cache(maxsize=1)
def _table() -> tuple[int, float, dict[str, float]]:
    """(min_sm, instructions per element, {gpu name: non-tensor FP32 FLOP/s}) from specs/data/kv_dequant.toml."""
    doc = tables.read_toml(FILE)
    try:
        min_sm = int(doc["hardware_cvt"]["min_sm"])
        ipe = float(doc["software_decode"]["instructions_per_element"])
        rates = {name: float(t["value"]) * 1e12 for name, t in doc["simt_fp32_tflops"].items()}
        if not all(str(t.get("source", "")).strip() for t in doc["simt_fp32_tflops"].values()):
            raise KeyError("source")
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"specs/data/{FILE}: {e}") from None
    return min_sm, ipe, rates


def has_hardware_cvt(gpu: GpuSpec) -> bool | None:
    """True from sm_89 on (cvt.rn.f16x2.e4m3x2), False below, None for a non-NVIDIA GPU."""
    sm = gpu.sm_number
    return None if sm is None else sm >= _table()[0]


def kv_dequant(gpu: GpuSpec, kv: QuantScheme) -> KvDequant:
    """The decode cost of one FP8 KV element read on `gpu` (module docstring)."""
    if kv.name not in FP8_KV:
        return KvDequant(0.0, f"KV stored as {kv.name}: no FP8 decode")
    hw = has_hardware_cvt(gpu)
    if hw is None:
        return KvDequant(0.0, f"{gpu.compute_capability}: not an NVIDIA sm_XX GPU; the FP8 decode is not priced")
    min_sm, ipe, rates = _table()
    if hw:
        return KvDequant(0.0, f"{gpu.compute_capability} converts E4M3 in hardware (cvt.rn.f16x2.e4m3x2, sm_{min_sm}+)")
    rate = rates.get(gpu.name)
    if not rate:
        return KvDequant(None, f"{gpu.compute_capability} has no FP8 conversion (software decode, {ipe:g} "
                               f"instructions per element) and specs/data/{FILE} has no ALU rate for {gpu.name}")
    s = ipe / (rate / 2.0)
    return KvDequant(s, f"{gpu.compute_capability} has no FP8 conversion: software decode {ipe:g} instructions per "
                        f"KV element at {rate / 2.0 / 1e12:.2f} T instructions/s (half the {rate / 1e12:g} TFLOP/s "
                        f"non-tensor FP32 peak) = {s * 1e12:.3f} ps per element")
