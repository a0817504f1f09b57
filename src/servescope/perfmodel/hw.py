"""Adapter to the hardware side (servescope.specs.hardware / .collectives): GPU lookup and vectorised
collective times with the model's efficiency scales.

What it does: loads the collective curves of a GPU group, and evaluates `collective_time_s` over numpy arrays of message sizes, splitting
each call into its latency floor (time at 0 bytes) and its bandwidth part so `Efficiency` can scale them apart.
What it does not: hold any hardware numbers itself (they live, with sources, in specs/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servescope.specs.collectives import CollectiveCurves, curve_time_s
from servescope.specs.hardware import GpuSpec

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# Collective names as the model uses them; the curves use the same (see specs/collectives.py).
ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER, SEND_RECV = (
    "all_reduce", "all_gather", "all_to_all", "reduce_scatter", "send_recv")


def load_curves(gpu: GpuSpec, n_gpus: int, interconnect: str | None) -> CollectiveCurves:
    from servescope.specs.collectives import load_collectives

    return load_collectives(gpu, n_gpus, interconnect)


class CollectiveTimer:
    """Times of one collective on one GPU group, vectorised over message sizes.

    Evaluates specs.collectives.curve_time_s on numpy arrays and splits it:
    t = floor·lat_scale + (t_curve(bytes) − floor)/bw_scale. All-reduce uses the engine path
    (`vllm_all_reduce`: custom all-reduce in a CUDA graph where the system allows it, else NCCL).
    """

    def __init__(self, curves: CollectiveCurves, collective: str, n_gpus: int):
        self.n_gpus = n_gpus
        self._curve = curves.vllm_all_reduce if collective == ALL_REDUCE else curves.curves[collective]
        self.latency_s = float(self._curve.latency_floor_s)
        self.source = str(self._curve.source)

    def raw_s(self, message_bytes: ArrayLike) -> np.ndarray:
        mb = np.maximum(np.asarray(message_bytes, dtype=float), 1.0)
        if self.n_gpus <= 1:
            return np.zeros_like(mb)
        return np.asarray(curve_time_s(self._curve, mb))

    def parts_s(self, message_bytes: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(latency floor, bandwidth part) of the curve time at each message size (elementwise)."""
        raw = self.raw_s(message_bytes)
        floor = np.minimum(self.latency_s, raw)
        return floor, raw - floor

    def time_s(self, message_bytes: ArrayLike, lat_scale: float = 1.0, bw_scale: float = 1.0) -> np.ndarray:
        floor, bw_part = self.parts_s(message_bytes)
        return floor * lat_scale + bw_part / bw_scale
