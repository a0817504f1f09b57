"""Per-request serving costs outside the engine steps, by engine and release: specs/data/serving_boundaries.toml.

What it does: `delivery(backend, version)` — the seconds from the step that samples a token to the client holding
it (detokenise, build the output, stream it), with its source and the release entry it came from: the newest
entry whose `since` is at or below the version (no version, or one that does not parse: the newest entry; a
version older than every entry: the oldest). A file whose entries lack a number, a source or a release number, or
list them out of order, is a BadConfig naming the file, the engine and the field.
What it does not: price anything (simulate/boundaries.py and simulate/loop.py use it) or know the front end's cost
(the fitted per-request set-up of efficiency.toml; the data file's header says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from servescope.errors import BadConfig
from servescope.specs.engine_file import version_key
from servescope.specs.tables import read_toml

FILE = "serving_boundaries.toml"


@dataclass(frozen=True)
class Delivery:
    """First-token delivery of one engine release (seconds per token, its source, the entry's `since`)."""

    delivery_s: float
    source: str
    since: str


@lru_cache(maxsize=1)
def _entries() -> dict[str, tuple[tuple[tuple[int, ...], Delivery], ...]]:
    return {name: _checked(name, rows) for name, rows in read_toml(FILE).items()}


def _checked(name: str, rows: Any) -> tuple[tuple[tuple[int, ...], Delivery], ...]:
    where = f"specs/data/{FILE}: [[{name}]]"
    if not isinstance(rows, list) or not rows:
        raise BadConfig(f"{where}: expected one or more [[{name}]] entries")
    out: list[tuple[tuple[int, ...], Delivery]] = []
    for row in rows:
        since = str(row.get("since", ""))
        key = version_key(since)
        value, source = row.get("delivery_s"), row.get("delivery_s_source")
        if key is None:
            raise BadConfig(f"{where}: since {since!r} is not a release number")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise BadConfig(f"{where} since {since}: delivery_s must be a number of seconds >= 0, got {value!r}")
        if not isinstance(source, str) or not source.strip():
            raise BadConfig(f"{where} since {since}: delivery_s has no delivery_s_source")
        if out and key <= out[-1][0]:
            raise BadConfig(f"{where}: since {since} is not after {out[-1][1].since} (entries in release order)")
        out.append((key, Delivery(float(value), source, since)))
    return tuple(out)


def delivery(backend: str, version: str = "") -> Delivery:
    """The first-token delivery an engine of `version` pays (module docstring); BadConfig for an engine the file
    does not list."""
    entries = _entries()
    rows = entries.get(backend)
    if rows is None:
        raise BadConfig(f"specs/data/{FILE}: no entry for engine {backend!r}; known: {', '.join(sorted(entries))}")
    key = version_key(version) if version else None
    if key is None:
        return rows[-1][1]
    older = [d for k, d in rows if k <= key]
    return older[-1] if older else rows[0][1]
