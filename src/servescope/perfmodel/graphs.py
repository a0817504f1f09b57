"""CUDA-graph padding of a decode step, from the engine's captured sizes (specs.engines, `Engine.graphs`).

What it does: for a decode step of `t` tokens per rank, returns whether it replays a captured graph (t ≤ the
largest captured size) and the size it runs at (the next captured size ≥ t; eager steps run at t). The sizes are
the resolved engine record's (`sc.engine.graphs.capture_sizes`: engine, release and GPU memory), the one the
simulation's steps are priced with too. Prefill chunks run eagerly here.
What it does not: read any file (specs.engines does), model piecewise graphs of mixed batches (simulate/ does), or
time anything. The prompt tokens of a prefill step and whether waves stay in lock-step are the engine record's
scheduler values (`Engine.scheduler.max_num_batched_tokens`, `.lockstep_waves`), read by serving.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def padded_tokens(sizes: Sequence[int], tokens: np.ndarray, graphs: bool) -> tuple[np.ndarray, np.ndarray]:
    """(graphed 1.0/0.0, tokens the step runs at) for decode steps of `tokens` tokens per rank, with the captured
    decode batch sizes `sizes` (ascending; an engine record's `graphs.capture_sizes`)."""
    t = np.asarray(tokens, dtype=float)
    if not graphs:
        return np.zeros_like(t), t
    captured = np.asarray(sizes, dtype=float)
    idx = np.searchsorted(captured, t - 1e-9)
    inside = idx < len(captured)
    padded = np.where(inside, captured[np.minimum(idx, len(captured) - 1)], t)
    return inside.astype(float), padded
