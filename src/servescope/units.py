"""The one place units are converted.

SI (seconds, bytes, FLOP/s, bytes/s) inside the performance model; microseconds in trace tables.
Decimal prefixes only: giga is 1e9, tera is 1e12 (never 2**30 / 2**40). GiB is spelled out where meant.
Also the one table of element sizes (BYTES_PER_ELEMENT): every dtype spelling servescope reads (a trace's
`Input type`, a collective's dtype arg, a quantization scheme) maps to one of its names where it is read.
"""

from __future__ import annotations

US_PER_S = 1e6
MS_PER_S = 1e3
NS_PER_US = 1e3

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12
PETA = 1e15
GIB = float(2**30)
MIB = float(2**20)


def us_to_s(us: float) -> float:
    return us / US_PER_S


def s_to_us(s: float) -> float:
    return s * US_PER_S


def s_to_ms(s: float) -> float:
    return s * MS_PER_S


def ms_to_s(ms: float) -> float:
    return ms / MS_PER_S


def us_to_ms(us: float) -> float:
    return us / 1e3


def ns_to_us(ns: float) -> float:
    return ns / NS_PER_US


def gb_to_bytes(gb: float) -> float:
    """Decimal gigabytes (1e9 bytes) to bytes."""
    return gb * GIGA


def bytes_to_gb(n_bytes: float) -> float:
    return n_bytes / GIGA


def gib_to_bytes(gib: float) -> float:
    return gib * GIB


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GIB


def tb_per_s_to_bytes_per_s(tb_per_s: float) -> float:
    return tb_per_s * TERA


def gb_per_s_to_bytes_per_s(gb_per_s: float) -> float:
    return gb_per_s * GIGA


def tflops_to_flops(tflops: float) -> float:
    return tflops * TERA


def mib_to_bytes(mib: float) -> float:
    return mib * float(2**20)


# Bytes per stored element, by short dtype name: the one element-size table (analysis.costs, analysis.rules and
# specs.quant read it through their own spellings). Source: c10/core/ScalarType.h element sizes (fp8 = every 8-bit
# float format: e4m3fn, e5m2, their fnuz variants and the e8m0 scale type; fp4x2 = Float4_e2m1fn_x2, two 4-bit
# values in one stored byte; complex32/64/128 = ComplexHalf/Float/Double). fp4 and int4 are the logical size of
# one 4-bit value, half a byte.
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4x2": 1, "fp4": 0.5,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "int4": 0.5, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1,
    "bool": 1, "complex32": 4, "complex64": 8, "complex128": 16,
}
