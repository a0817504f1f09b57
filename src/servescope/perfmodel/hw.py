"""Adapter to the hardware side (servescope.specs.hardware / .collectives): GPU lookup and vectorised
collective times with the model's efficiency scales.

What it does: resolves GPU names (including the validation CSV's system names such as `b200_sxm`), loads the
collective curves of a GPU group, and evaluates `collective_time_s` over numpy arrays of message sizes, splitting
each call into its latency floor (time at 0 bytes) and its bandwidth part so `Efficiency` can scale them apart.
What it does not: hold any hardware numbers itself (they live, with sources, in specs/).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servescope.errors import UnknownName

# Collective names as the model uses them; the curves use the same (see specs/collectives.py).
ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER, SEND_RECV = (
    "all_reduce", "all_gather", "all_to_all", "reduce_scatter", "send_recv")


def load_gpu(name: str) -> Any:
    """GpuSpec by name; UnknownName (from specs.hardware) lists the known ones."""
    from servescope.specs.hardware import load_gpu as _load

    try:
        return _load(name)
    except UnknownName:
        # Validation CSVs spell systems as `<gpu>_sxm` / `gb200`; try the bare name before giving up.
        for alt in (name.removesuffix("_sxm"), name.replace("_", "-")):
            if alt != name:
                try:
                    return _load(alt)
                except UnknownName:
                    continue
        raise


def load_curves(gpu: Any, n_gpus: int, interconnect: str | None) -> Any:
    try:
        from servescope.specs.collectives import load_collectives
    except ImportError:  # hardware side not installed yet: a datasheet alpha-beta stand-in, flagged in `source`
        return _Fallback(gpu, n_gpus)
    return load_collectives(gpu, n_gpus, interconnect)


class _Fallback:
    """Datasheet alpha-beta curves used only when specs.collectives is missing (development)."""

    source = "fallback: datasheet alpha-beta (specs.collectives unavailable)"

    def __init__(self, gpu: Any, n_gpus: int):
        nvl = float(getattr(gpu, "nvlink_bw_bytes_per_s", 0.0) or 0.0)
        self.busbw = 0.8 * nvl if nvl else 0.4 * float(gpu.pcie_bw_bytes_per_s)
        self.latency_s = (8e-6 if nvl else 25e-6) if n_gpus > 2 else 6e-6




class CollectiveTimer:
    """Times of one collective on one GPU group, vectorised over message sizes.

    Evaluates the same formula as specs.collectives.curve_time_s (log-log interpolation of the measured points,
    the floor below the smallest, floor-free linear extension above the largest; two-parameter form otherwise)
    on numpy arrays, and splits it: t = floor·lat_scale + (t_curve(bytes) − floor)/bw_scale. All-reduce uses the
    engine path (`vllm_all_reduce`: custom all-reduce in a CUDA graph where the system allows it, else NCCL).
    """

    def __init__(self, curves: Any, collective: str, n_gpus: int):
        self.n_gpus = n_gpus
        if isinstance(curves, _Fallback):
            self.latency_s, self._bw, self._factor = curves.latency_s, curves.busbw, _factor(collective, n_gpus)
            self._xs = self._ts = np.zeros(0)
            self.source = curves.source
            return
        curve = curves.vllm_all_reduce if collective == ALL_REDUCE else curves.curves[collective]
        self.latency_s = float(curve.latency_floor_s)
        self._bw = float(curve.bus_bw_bytes_per_s)
        self._factor = _factor(curve.collective, curve.n_gpus)
        self._xs = np.log(np.asarray(curve.message_bytes, dtype=float))
        self._ts = np.log(np.asarray(curve.time_s, dtype=float))
        self._last_x = float(curve.message_bytes[-1]) if curve.message_bytes else 0.0
        self._last_t = float(curve.time_s[-1]) if curve.time_s else 0.0
        self.source = str(curve.source)

    def raw_s(self, message_bytes: Any) -> np.ndarray:
        mb = np.maximum(np.asarray(message_bytes, dtype=float), 1.0)
        if self.n_gpus <= 1:
            return np.zeros_like(mb)
        if not self._xs.size:
            return self.latency_s + self._factor * mb / self._bw
        inner = np.exp(np.interp(np.log(mb), self._xs, self._ts))
        above = self._last_t + self._factor * (mb - self._last_x) / self._bw
        return np.where(mb >= self._last_x, above, inner)

    def parts_s(self, message_bytes: Any) -> tuple[np.ndarray, np.ndarray]:
        """(latency floor, bandwidth part) of the curve time at each message size (elementwise)."""
        raw = self.raw_s(message_bytes)
        floor = np.minimum(self.latency_s, raw)
        return floor, raw - floor

    def time_s(self, message_bytes: Any, lat_scale: float = 1.0, bw_scale: float = 1.0) -> np.ndarray:
        floor, bw_part = self.parts_s(message_bytes)
        return floor * lat_scale + bw_part / bw_scale


def _factor(collective: str, n: int) -> float:
    n = max(n, 2)
    if collective == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    return 1.0 if collective in (SEND_RECV, "broadcast") else (n - 1) / n
