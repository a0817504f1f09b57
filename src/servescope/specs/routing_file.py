"""A measured expert-count histogram (`--routing FILE`): how many tokens each routed expert received.

Formats: JSON — a list of counts, or {"counts": [...]} (one MoE layer, or a list of per-layer lists, summed);
CSV/TSV/text — one count per line, or `expert,count` lines (a header line is skipped). Counts ≥ 0, not all 0.
Returns the shares (count / total) sorted in descending order: the step model only needs the load profile.
Bad input raises BadConfig naming the file and the problem; a wrong expert count names both counts.
"""

from __future__ import annotations

import math
from pathlib import Path

from servescope._paths import decode_json, read_text
from servescope.errors import BadConfig

MAX_BYTES = 64 * 1024 * 1024  # a histogram is small; anything bigger is not one
MAX_COUNT = 1e18  # tokens one expert received: beyond any run, still summed exactly enough in a double


def _count(path: Path, value: object, where: str) -> float:
    """A token count: a JSON number (not a bool), finite, in [0, MAX_COUNT]; BadConfig naming where otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadConfig(f"{path}: {where}: got {_shown(value)} (expected a token count: a number ≥ 0)")
    v = float(value) if not isinstance(value, int) or abs(value) < 2**63 else math.inf
    if not (math.isfinite(v) and 0 <= v <= MAX_COUNT):
        raise BadConfig(f"{path}: {where}: got {_shown(value)} (expected a finite token count in [0, 1e18])")
    return v


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, int) else f"{float(value):g}"
    return text if len(text) <= 40 else text[:37] + "..."


def _json_counts(path: Path, text: str) -> list[float]:
    doc = decode_json(text, path, BadConfig)
    doc = doc.get("counts") if isinstance(doc, dict) else doc
    if not isinstance(doc, list) or not doc:
        raise BadConfig(f"{path}: expected a list of per-expert token counts (or {{\"counts\": [...]}})")
    if all(isinstance(x, list) for x in doc):  # per layer: every cell checked, then summed per expert
        width = {len(x) for x in doc}
        if len(width) != 1:
            raise BadConfig(f"{path}: per-layer count lists of different lengths {sorted(width)}")
        layers = [[_count(path, c, f"layer {i + 1}, expert {j}") for j, c in enumerate(row)]
                  for i, row in enumerate(doc)]
        return [math.fsum(col) for col in zip(*layers, strict=True)]
    return [_count(path, c, f"expert {j}") for j, c in enumerate(doc)]


def _numbers(path: Path, text: str) -> list[float]:
    if path.suffix.lower() == ".json":
        return _json_counts(path, text)
    out: list[float] = []
    for i, line in enumerate(x.strip() for x in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        cell = line.replace("\t", ",").split(",")[-1].strip()
        try:
            value = float(cell)
        except ValueError:
            if out or i > 0:
                raise BadConfig(f"{path}:{i + 1}: {cell[:40]!r} is not a token count") from None
            continue
        out.append(_count(path, value, f"line {i + 1}"))
    return out


def read_expert_histogram(path: str | Path, n_experts: int) -> tuple[float, ...]:
    """Descending per-expert shares of routed tokens from a histogram file of `n_experts` counts (module docstring)."""
    p = Path(path)
    counts = _numbers(p, read_text(p, "expert-count histogram", BadConfig, ceiling=MAX_BYTES))
    if len(counts) != n_experts:
        raise BadConfig(f"{p}: {len(counts)} expert counts, but the model has {n_experts} routed experts")
    total = math.fsum(counts)
    if total <= 0:
        raise BadConfig(f"{p}: counts must be finite, >= 0 and not all 0")
    return tuple(sorted((c / total for c in counts), reverse=True))
