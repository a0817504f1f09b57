"""A measured expert-count histogram (`--routing FILE`): how many tokens each routed expert received.

Formats: JSON — a list of counts, or {"counts": [...]} (one MoE layer, or a list of per-layer lists, summed);
CSV/TSV/text — one count per line, or `expert,count` lines (a header line is skipped). Counts ≥ 0, not all 0.
Returns the shares (count / total) sorted in descending order: the step model only needs the load profile.
Bad input raises BadConfig naming the file and the problem; a wrong expert count names both counts.
"""

from __future__ import annotations

import json
from pathlib import Path

from servescope.errors import BadConfig

MAX_BYTES = 64 * 1024 * 1024  # a histogram is small; anything bigger is not one


def _numbers(path: Path, text: str) -> list[float]:
    if path.suffix.lower() == ".json":
        doc = json.loads(text)
        doc = doc.get("counts") if isinstance(doc, dict) else doc
        if isinstance(doc, list) and doc and all(isinstance(x, list) for x in doc):
            width = {len(x) for x in doc}
            if len(width) != 1:
                raise BadConfig(f"{path}: per-layer count lists of different lengths {sorted(width)}")
            doc = [sum(col) for col in zip(*doc, strict=True)]
        if not isinstance(doc, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in doc):
            raise BadConfig(f"{path}: expected a list of per-expert token counts (or {{\"counts\": [...]}})")
        return [float(x) for x in doc]
    out: list[float] = []
    for i, line in enumerate(x.strip() for x in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        cell = line.replace("\t", ",").split(",")[-1].strip()
        try:
            out.append(float(cell))
        except ValueError:
            if out or i > 0:
                raise BadConfig(f"{path}: line {i + 1}: {cell!r} is not a token count") from None
    return out


def read_expert_histogram(path: str | Path, n_experts: int) -> tuple[float, ...]:
    """Descending per-expert shares of routed tokens from a histogram file of `n_experts` counts (module docstring)."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise BadConfig(f"{p}: {p.stat().st_size:,} bytes is too large for an expert-count histogram")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise BadConfig(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BadConfig(f"{p}: not a text file") from None
    try:
        counts = _numbers(p, text)
    except (ValueError, RecursionError) as e:
        raise BadConfig(f"{p}: not valid JSON: {e}") from None
    if len(counts) != n_experts:
        raise BadConfig(f"{p}: {len(counts)} expert counts, but the model has {n_experts} routed experts")
    if any(c < 0 or c != c or c == float("inf") for c in counts) or sum(counts) <= 0:
        raise BadConfig(f"{p}: counts must be finite, >= 0 and not all 0")
    total = sum(counts)
    return tuple(sorted((c / total for c in counts), reverse=True))
