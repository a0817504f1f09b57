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


def _fallback_time_s(curves: _Fallback, collective: str, message_bytes: Any, n_gpus: int) -> Any:
    n = max(n_gpus, 2)
    factor = 2.0 * (n - 1) / n if collective == ALL_REDUCE else (n - 1) / n
    return curves.latency_s + factor * np.asarray(message_bytes, dtype=float) / curves.busbw


class CollectiveTimer:
    """Times of one collective on one GPU group, vectorised: t = lat·lat_scale + (t(bytes) − lat)/bw_scale."""

    def __init__(self, curves: Any, collective: str, n_gpus: int):
        if isinstance(curves, _Fallback):
            collective_time_s: Any = _fallback_time_s
        else:
            from servescope.specs.collectives import collective_time_s
        self._f = collective_time_s
        self._curves, self._name, self._n = curves, collective, n_gpus
        self.latency_s = float(collective_time_s(curves, collective, 0.0, n_gpus))
        self._vector_ok = True

    def _raw(self, message_bytes: np.ndarray) -> np.ndarray:
        if self._vector_ok:
            try:
                out = np.asarray(self._f(self._curves, self._name, message_bytes, self._n), dtype=float)
                if out.shape == message_bytes.shape:
                    return out
            except (TypeError, ValueError):
                pass
            self._vector_ok = False
        flat = [float(self._f(self._curves, self._name, float(b), self._n)) for b in message_bytes.ravel()]
        return np.asarray(flat, dtype=float).reshape(message_bytes.shape)

    def time_s(self, message_bytes: Any, lat_scale: float = 1.0, bw_scale: float = 1.0) -> np.ndarray:
        mb = np.asarray(message_bytes, dtype=float)
        raw = self._raw(mb)
        bw_part = np.maximum(raw - self.latency_s, 0.0)
        return self.latency_s * lat_scale + bw_part / bw_scale
