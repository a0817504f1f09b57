"""Predicted vs measured speculative-decoding gains on published with/without pairs.

Does: read a pairs CSV (tests/data/planner/spec_pairs.csv: one row per published pair that the model can
price, each citing its line in /work/shared/reference/speculative-decoding-measured.md) and predict each row's
gain with perfmodel.speculative.spec_gain. Row kinds:
  gain    the source states AL: predicted = spec_gain(AL); error = predicted / measured − 1
  anchor  AL not stated: not scored; the reference of `ratio` rows on the same setup
  ratio   predicted = measured(anchor) · gain(batch) / gain(anchor batch): AL cancels in a ratio of gains on one
          setup (gain = t_base · AL / iteration), so the batch dependence is tested without knowing AL
  below   the source only says the gain is below `measured`: within when predicted < measured
Does not: choose k or acceptance (the row gives them), or model engines' overlap schedulers.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from servescope.errors import BadConfig
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.speculative import SpecShape, spec_gain

KINDS = ("gain", "anchor", "ratio", "below")
TOLERANCE = 0.20  # the target: predicted within ±20 % of measured


@dataclass(frozen=True)
class SpecPair:
    id: str
    ref_row: int
    source_line: int
    source: str
    method: str
    model: str
    gpu: str
    tp: int
    quant: str
    backend: str
    batch: int
    k: int
    depth: int
    width: int
    al: float | None
    context_len: float
    measured: float
    kind: str
    relative_to: str
    note: str


@dataclass(frozen=True)
class PairResult:
    pair: SpecPair
    predicted: float
    error: float | None  # predicted / measured − 1 (None for anchors and `below` rows)
    within: bool | None  # None for anchors


def load_pairs(path: str | Path) -> list[SpecPair]:
    """Rows of a pairs CSV; BadConfig naming the file and row when a field is missing or malformed."""
    p = Path(path)
    out = []
    with p.open(newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            try:
                pair = SpecPair(
                    row["id"], int(row["ref_row"]), int(row["source_line"]), row["source"], row["method"],
                    row["model"], row["gpu"], int(row["tp"]), row["quant"], row["backend"], int(row["batch"]),
                    int(row["k"]), int(row["depth"] or 0), int(row["width"] or 1),
                    float(row["al"]) if row["al"] else None, float(row["context_len"]), float(row["measured"]),
                    row["kind"], row["relative_to"], row["note"],
                )
            except (KeyError, ValueError, TypeError) as e:
                raise BadConfig(f"{p}: line {i}: {e}") from None
            if pair.kind not in KINDS or (pair.kind in ("gain", "below") and pair.al is None):
                raise BadConfig(f"{p}: line {i}: kind {pair.kind!r} needs one of {KINDS} (gain/below need al)")
            out.append(pair)
    return out


def model_gain(pair: SpecPair, batch: int | None = None) -> float:
    """The model's gain for the pair's setup at `batch` (default the pair's); AL 1 when the row has none
    (only ratios of such gains are used)."""
    sc = Scenario.build(pair.model, pair.gpu, tp=pair.tp, quant=pair.quant, backend=pair.backend,
                        isl=max(1, int(pair.context_len)), osl=1, check_memory=False)
    shape = SpecShape(pair.method, pair.k, pair.depth, pair.width)
    return spec_gain(sc, shape, pair.al or 1.0, batch or pair.batch, pair.context_len).gain


def evaluate(pairs: list[SpecPair]) -> list[PairResult]:
    """Predicted gain, error and ±TOLERANCE verdict per row (formula per kind in the module docstring)."""
    by_id = {p.id: p for p in pairs}
    out = []
    for p in pairs:
        if p.kind == "ratio":
            anchor = by_id.get(p.relative_to)
            if anchor is None:
                raise BadConfig(f"pair {p.id}: relative_to {p.relative_to!r} is not a row id")
            predicted = anchor.measured * model_gain(p) / model_gain(p, anchor.batch)
        else:
            predicted = model_gain(p)
        if p.kind == "anchor":
            out.append(PairResult(p, predicted, None, None))
        elif p.kind == "below":
            out.append(PairResult(p, predicted, None, predicted < p.measured))
        else:
            err = predicted / p.measured - 1.0
            out.append(PairResult(p, predicted, err, abs(err) <= TOLERANCE))
    return out


def share_within(results: list[PairResult]) -> tuple[int, int]:
    """(rows within ±TOLERANCE or on the right side of a bound, scored rows)."""
    scored = [r for r in results if r.within is not None]
    return sum(1 for r in scored if r.within), len(scored)
