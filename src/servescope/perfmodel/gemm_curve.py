"""Measured dense-GEMM time vs M (rows of the GEMM) relative to the datasheet roofline, per GPU, from traces.

What it does: reads `data/gemm_efficiency.toml` (written by data-build/measure_gemm_efficiency.py from the shaped GEMM
kernels of the real traces in ../shared/traces; each point names its trace files and kernel count) and gives, for a
GPU, the curve the step model prices dense GEMMs with:
    t_gemm(M) = max(weight bytes / datasheet HBM BW, 2·params·M / datasheet dense peak) · ratio(M)
    ratio(M)  = mem_ratio                                     for M ≤ mem_m_max   (bandwidth-bound kernels pooled)
              = comp_ratio                                    for M ≥ comp_m_min  (compute-bound kernels pooled)
              = log-linear in M between (mem_m_max, mem_ratio) and (comp_m_min, comp_ratio)
(dimensionless; ratio ≥ 1 means slower than the datasheet roofline). The ratio is used as measured: no fitted
efficiency multiplies it. A GPU with no measured curve takes the curve of a measured GPU of the same vendor,
generation and compute-capability family (e.g. sm_10x), as a ratio to its own roofline, and says so; a GPU with
neither, or whose measured points do not cover both regimes, keeps the roofline × global fitted efficiencies
(`gemm_bw_eff`, `compute_eff`) and `describe` says so.
What it does not: price routed-expert (grouped) GEMMs or attention (their efficiencies stay as they were), or
read traces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables
from servescope.specs.hardware import GpuSpec


@dataclass(frozen=True)
class GemmCurve:
    """Both regimes of one measured GPU's dense-GEMM ratio to the datasheet roofline."""

    measured_on: str  # spec name of the GPU whose traces gave the points
    mem_ratio: float
    mem_m_max: float
    comp_ratio: float
    comp_m_min: float
    kernels: int
    source: str

    def ratio(self, m: np.ndarray) -> np.ndarray:
        """ratio(M), elementwise (see the module docstring); M below 1 counts as 1."""
        lm = np.log(np.maximum(np.asarray(m, dtype=float), 1.0))
        lo, hi = np.log(self.mem_m_max), np.log(self.comp_m_min)
        w = np.clip((lm - lo) / (hi - lo), 0.0, 1.0)
        return np.asarray(self.mem_ratio + w * (self.comp_ratio - self.mem_ratio))


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tables.gemm_efficiency()


def _measured(name: str) -> GemmCurve | None:
    sec = _table().get(name)
    need = ("mem_ratio", "mem_m_max", "comp_ratio", "comp_m_min")
    if not isinstance(sec, dict) or any(k not in sec for k in need):
        return None
    if not float(sec["mem_m_max"]) < float(sec["comp_m_min"]):
        raise BadConfig(f"specs/data/gemm_efficiency.toml [{name}]: mem_m_max must be below comp_m_min")
    return GemmCurve(name, float(sec["mem_ratio"]), float(sec["mem_m_max"]), float(sec["comp_ratio"]),
                     float(sec["comp_m_min"]), int(sec.get("mem_kernels", 0)) + int(sec.get("comp_kernels", 0)),
                     str(sec.get("source", "")))


def _family(g: GpuSpec) -> tuple[str, str, str]:
    """(vendor, generation, compute-capability family: 'sm_10' for sm_100/sm_103, 'gfx94' ...)."""
    return g.vendor.lower(), g.generation.lower(), (g.compute_capability or "")[:5]


@lru_cache(maxsize=64)
def _curve_by_name(name: str, family: tuple[str, str, str]) -> GemmCurve | None:
    own = _measured(name)
    if own is not None:
        return own
    from servescope.specs.hardware import load_gpu

    for other in _table():
        if isinstance(_table()[other], dict) and _measured(other) is not None:
            try:
                if _family(load_gpu(other)) == family:
                    return _measured(other)
            except Exception:  # noqa: BLE001 - a section naming no known GPU transfers to nothing
                continue
    return None


def curve_for(gpu: GpuSpec) -> GemmCurve | None:
    """The measured GEMM curve of this GPU, else one transferred from its family, else None."""
    return _curve_by_name(gpu.name, _family(gpu))


def describe(gpu: GpuSpec) -> str:
    """Provenance of the dense-GEMM pricing of this GPU, in words."""
    c = curve_for(gpu)
    if c is None:
        sec = _table().get(gpu.name)
        why = ("its measured points cover one regime only" if isinstance(sec, dict)
               else "no measured GEMM curve for it or its family (a family GPU's points, if any, cover one regime)")
        return f"datasheet peak × global fitted efficiency (data/efficiency.toml): {why} (data/gemm_efficiency.toml)"
    where = f"measured on this GPU ({c.kernels} kernels)" if c.measured_on == gpu.name else (
        f"transferred from {c.measured_on} (same family; {c.kernels} kernels) as a ratio to this GPU's roofline")
    return (f"dense GEMMs: datasheet roofline × measured ratio vs M, {where}: {c.mem_ratio:g} up to M={c.mem_m_max:g}, "
            f"{c.comp_ratio:g} from M={c.comp_m_min:g}, log-M interpolation between (data/gemm_efficiency.toml); "
            "grouped expert GEMMs and attention: datasheet × global fitted efficiency")
