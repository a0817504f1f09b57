"""CUDA-graph capture sizes per engine: which decode batches replay a graph, padded to which size.

What it does: reads the engine defaults in `specs/data/engines.toml` (each with its source): the prompt tokens
one prefill step takes and whether waves of requests stay in lock-step (serving.py TTFT), and, for a
decode step of `t` tokens per rank, returns whether it replays a captured graph (t ≤ the largest captured size)
and the size it runs at (the next captured size ≥ t; eager steps run at t). Prefill chunks run eagerly here.
What it does not: model piecewise graphs of mixed batches (simulate/ does), or time anything.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables


@lru_cache(maxsize=1)
def engine_table() -> dict[str, dict[str, object]]:
    """The parsed data/engines.toml: one section per backend (graph sizes and measured overheads, with sources)."""
    doc = tables.engine_graphs()
    return {k: v for k, v in doc.items() if isinstance(v, dict)}


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1,2,4,8:256:8' -> (1, 2, 4, 8, 16, ..., 248): items are ints or start:stop:step ranges."""
    out: list[int] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        try:
            nums = [int(p) for p in item.split(":")]
        except ValueError:
            raise BadConfig(f"specs/data/engines.toml: bad capture size {item!r}") from None
        out.extend(range(*nums) if len(nums) == 3 else nums)
    return tuple(sorted(set(out)))


@lru_cache(maxsize=8)
def capture_sizes(backend: str) -> np.ndarray:
    """Captured decode batch sizes (tokens per rank) of an engine's default configuration, ascending."""
    sec = engine_table().get(backend)
    if sec is None or "cuda_graph_sizes" not in sec:
        raise BadConfig(f"specs/data/engines.toml: no cuda_graph_sizes for backend {backend!r}")
    return np.asarray(parse_sizes(str(sec["cuda_graph_sizes"])), dtype=float)


def padded_tokens(backend: str, tokens: np.ndarray, graphs: bool) -> tuple[np.ndarray, np.ndarray]:
    """(graphed 1.0/0.0, tokens the step runs at) for decode steps of `tokens` tokens per rank."""
    t = np.asarray(tokens, dtype=float)
    if not graphs:
        return np.zeros_like(t), t
    sizes = capture_sizes(backend)
    idx = np.searchsorted(sizes, t - 1e-9)
    inside = idx < len(sizes)
    padded = np.where(inside, sizes[np.minimum(idx, len(sizes) - 1)], t)
    return inside.astype(float), padded


GIB = 1024.0**3


def prefill_tokens_per_step(backend: str, hbm_bytes: float) -> int:
    """Prompt tokens one prefill step of the engine's default configuration takes on a GPU of `hbm_bytes`
    (data/engines.toml prefill_tokens_per_step, with its source)."""
    sec = engine_table().get(backend, {})
    text = str(sec.get("prefill_tokens_per_step", "inf:8192"))
    gib = float(hbm_bytes) / GIB
    try:
        table = [(float(b), int(t)) for b, t in (item.split(":") for item in text.split(","))]
    except ValueError:
        raise BadConfig(f"specs/data/engines.toml: bad prefill_tokens_per_step {text!r} ({backend})") from None
    return next((t for b, t in table if gib < b), table[-1][1])


def lockstep_waves(backend: str) -> bool:
    """True for engines whose steps are all-prefill or all-decode (data/engines.toml lockstep_waves)."""
    return bool(engine_table().get(backend, {}).get("lockstep_waves", False))
