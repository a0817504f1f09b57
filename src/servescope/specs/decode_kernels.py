"""The engines' sparse-attention decode kernels (DSA / sparse MLA of DeepSeek-V3.2/V4 and GLM-5): name → loop shape.

Does: read specs/data/decode_kernels.toml — per kernel, the regex its name matches and what one CTA of it does:
tokens per tile, heads per CTA (the grid is tokens × ⌈heads / head tile⌉), bytes one token reads, the query and fp32
state widths, the token segments its loop walks by default, its split-K combine's parallelism and how its split path
cuts the loop (the whole range in S chunks clamped to each token's valid length, or each token's own length) — each
with its source; `shape_for(name)` finds one. A file that lacks a field or holds a bad value raises BadConfig naming the
file, the kernel and the field.
Does not: price anything (perfmodel.split_k does) or detect a kernel in a trace (analysis.sparse_decode does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from servescope.errors import BadConfig
from servescope.specs.tables import read_toml

_FILE = "decode_kernels.toml"
_INTS = ("block", "head_block", "q_dim", "state_dim", "slices")


@dataclass(frozen=True)
class DecodeKernel:
    """One engine's sparse decode kernel: its loop and state (module docstring), with its sources."""

    label: str
    pattern: str               # regex on the kernel name
    block: int                 # tokens per tile of its loop
    head_block: int            # heads per CTA
    token_bytes: float         # bytes one token reads (KV row + index)
    q_dim: int                 # query width, bf16
    state_dim: int             # fp32 accumulator width a split stores
    segments: tuple[int, ...]  # tokens per CTA of each segment by default (the model's top-k and window replace them)
    slices: int                # combine CTAs per output tile
    source: str                # one line of provenance (the file's `summary`)
    sources: dict[str, str] = field(default_factory=dict, compare=False)  # each number's source
    clamped_splits: bool = False  # the split path cuts the whole range in S chunks, each clamped to the valid length


def _kernel(i: int, d: dict[str, Any]) -> DecodeKernel:
    where = f"specs/data/{_FILE}: kernel {i + 1} ({d.get('label', '?')})"
    try:
        ints = {k: int(d[k]) for k in _INTS}
        segs = tuple(int(n) for n in d["segments"])
        k = DecodeKernel(str(d["label"]), str(d["pattern"]), ints["block"], ints["head_block"],
                         float(d["token_bytes"]), ints["q_dim"], ints["state_dim"], segs, ints["slices"],
                         str(d["summary"]), {str(a): str(b) for a, b in dict(d["source"]).items()},
                         bool(d["clamped_splits"]))
        re.compile(k.pattern)
    except KeyError as e:
        raise BadConfig(f"{where}: missing {e.args[0]}") from None
    except (TypeError, ValueError, re.error) as e:
        raise BadConfig(f"{where}: {e}") from None
    if min(ints.values()) < 1 or k.token_bytes <= 0 or not segs or min(segs) < 1:
        raise BadConfig(f"{where}: widths, tiles and segments must be ≥ 1")
    missing = [f for f in (*_INTS, "token_bytes", "segments", "clamped_splits") if not k.sources.get(f)]
    if missing:
        raise BadConfig(f"{where}: no source for {', '.join(missing)}")
    return k


@cache
def kernels() -> tuple[DecodeKernel, ...]:
    """The table, in file order (the first match wins)."""
    rows = read_toml(_FILE).get("kernel")
    if not isinstance(rows, list) or not rows:
        raise BadConfig(f"specs/data/{_FILE}: no [[kernel]] tables")
    return tuple(_kernel(i, d) for i, d in enumerate(rows))


# Kernels that are already the split path (their time is split-K's, not a collapsed grid)
_ALREADY_SPLIT = re.compile(r"split|partial|combine|reduce", re.I)


def shape_for(name: str) -> DecodeKernel | None:
    """The table's entry for a kernel name (None: not a sparse decode kernel, or already a split kernel)."""
    if _ALREADY_SPLIT.search(name):
        return None
    return next((k for k in kernels() if re.search(k.pattern, name, re.I)), None)
