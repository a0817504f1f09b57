"""The one place units are converted.

SI (seconds, bytes, FLOP/s, bytes/s) inside the performance model; microseconds in trace tables.
Decimal prefixes only: giga is 1e9, tera is 1e12 (never 2**30 / 2**40). GiB is spelled out where meant.
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
