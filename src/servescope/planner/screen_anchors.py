"""Where the grid sweep's screen (planner.screen) evaluates the step model, and how it interpolates between: the
anchors along each axis (geometric picks of the grid's values, the batches where CUDA-graph padding changes) and the
multilinear weights of each point's 2^d surrounding anchors.
What it does not: evaluate the model (planner.screen does) or choose how many anchors (its constants)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario


def brackets(anchors: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower anchor index around each x and the weight of the next one (anchors sorted, x inside them)."""
    if len(anchors) == 1:
        return np.zeros(x.shape, dtype=np.intp), np.zeros(x.shape)
    lo = np.clip(np.searchsorted(anchors, x, side="right") - 1, 0, len(anchors) - 2)
    return lo, np.clip((x - anchors[lo]) / (anchors[lo + 1] - anchors[lo]), 0.0, 1.0)


@dataclass(frozen=True)
class Corners:
    """The 2^d corners around each point in a table of shape `shape`: flat indices and weights, (2^d, points)."""

    flat: np.ndarray
    weight: np.ndarray

    @classmethod
    def of(cls, shape: tuple[int, ...], brackets: list[tuple[np.ndarray, np.ndarray]]) -> Corners:
        d, n = len(brackets), brackets[0][0].size
        flat, weight = np.zeros((2**d, n), dtype=np.intp), np.ones((2**d, n))
        for corner in range(2**d):
            idx = []
            for k, (lo, wt) in enumerate(brackets):
                up = (corner >> k) & 1
                idx.append(np.minimum(lo.ravel() + up, shape[k] - 1))
                weight[corner] *= wt.ravel() if up else 1.0 - wt.ravel()
            flat[corner] = np.ravel_multi_index(tuple(idx), shape)
        return cls(flat, weight)

    def at(self, table: np.ndarray) -> np.ndarray:
        """`table` interpolated multilinearly at the points: Σ over the corners of weight · value."""
        if np.all(table == table.flat[0]):
            return np.full(self.flat.shape[1], float(table.flat[0]))
        return np.asarray(np.einsum("ij,ij->j", table.ravel()[self.flat], self.weight))


def pick_anchors(values: Sequence[int], n: int) -> np.ndarray:
    """Up to n of the grid's values, geometric from the smallest to the largest (each snapped to the nearest)."""
    v = np.asarray(sorted(set(values)), dtype=float)
    if len(v) <= n:
        return v
    want = np.geomspace(v[0], v[-1], n)
    return np.unique(v[np.abs(v[None, :] - want[:, None]).argmin(axis=1)])


def batch_anchors(sc: Scenario, concurrency: Sequence[int]) -> np.ndarray:
    """1, the grid's concurrencies, and each CUDA-graph capture size s of the engine on both sides of its edge
    (s·dp and s·dp + 1 sequences over the dp ranks), up to the largest concurrency: between s·dp + 1 and the next
    size's s'·dp the step runs padded to s', so its padded parts are flat there and the rest affine in the batch."""
    top = max(concurrency)
    edges = [e for s in (sc.engine.graphs.capture_sizes if sc.cuda_graphs else ()) for e in (s * sc.dp, s * sc.dp + 1)]
    return np.unique(np.asarray([1, *concurrency, *(e for e in edges if e <= top)], dtype=float))


def ctx_anchors(ctx: np.ndarray, extra: np.ndarray, n: int) -> np.ndarray:
    """n context lengths geometric from the smallest to the largest decode context of the grid, and `extra`."""
    lo, hi = float(ctx.min()), float(ctx.max())
    return np.unique(np.concatenate([np.geomspace(max(lo, 1.0), max(hi, 1.0), n), [lo, hi], extra]))
