"""Predicted vs measured speculative-decoding gains on published with/without pairs.

Does: read the speculative rows of the pair ledger (tests/data/planner/pairs_ledger.csv, validation.pairs; rows
with a `spec_kind`: one per published pair that the model can price, each citing its line in
/work/shared/reference/speculative-decoding-measured.md; the older spec_pairs.csv layout is still read) and predict each row's
gain with perfmodel.speculative. Each row is priced once into `PairTerms` (plain step, iteration without the
fitted host costs, and what those costs multiply), so a gain under any HostCosts is closed-form:
    gain = t_base · AL / (iteration + per_seq_s · B + per_forward_s · drafter forwards)
(validation.spec_fit fits the two host costs and cross-validates them leaving one source out). Row kinds:
  gain    the source states AL: predicted = spec_gain(AL); error = predicted / measured − 1
  anchor  AL not stated: not scored; the reference of `ratio` rows on the same setup
  ratio   predicted = measured(anchor) · gain(batch) / gain(anchor batch): AL cancels in a ratio of gains on one
          setup (gain = t_base · AL / iteration), so the batch dependence is tested without knowing AL
  below   the source only says the gain is below `measured`: within when predicted < measured
Does not: choose k or acceptance (the row gives them), or model engines' overlap schedulers.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servescope.errors import BadConfig
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.speculative import HOST_COSTS, HostCosts, SpecShape, spec_gain
from servescope.validation.pairs import Pair

KINDS = ("gain", "anchor", "ratio", "below")
SPEC_TRACK = "speculative_decoding"  # the plan's track name, as the pair ledger spells it
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
    engine: str  # speculative.spec_engine name: "sglang" or "sglang-0.4" (the engine version the source ran)
    batch: int
    k: int
    depth: int
    width: int
    draft_vocab: int | None  # an EAGLE-3 head's draft vocabulary (its config's draft_vocab_size); None = target's
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
    """Rows of a pairs CSV — the pair ledger (validation.pairs: its speculative rows that carry a `spec_kind`) or
    this module's own layout; BadConfig naming the file and row when a field is missing or malformed."""
    from servescope.validation.pairs import is_ledger, read_ledger

    p = Path(path)
    if is_ledger(p):
        return [spec_pair(x, p) for x in read_ledger(p) if x.track == SPEC_TRACK and x.cell("spec_kind")]
    out = []
    with p.open(newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            try:
                pair = SpecPair(
                    row["id"], int(row["ref_row"]), int(row["source_line"]), row["source"], row["method"],
                    row["model"], row["gpu"], int(row["tp"]), row["quant"], row["backend"],
                    row.get("engine") or row["backend"], int(row["batch"]),
                    int(row["k"]), int(row["depth"] or 0), int(row["width"] or 1),
                    int(row["draft_vocab"]) if row.get("draft_vocab") else None,
                    float(row["al"]) if row["al"] else None, float(row["context_len"]), float(row["measured"]),
                    row["kind"], row["relative_to"], row["note"],
                )
            except (KeyError, ValueError, TypeError) as e:
                raise BadConfig(f"{p}: line {i}: {e}") from None
            if pair.kind not in KINDS or (pair.kind in ("gain", "below") and pair.al is None):
                raise BadConfig(f"{p}: line {i}: kind {pair.kind!r} needs one of {KINDS} (gain/below need al)")
            out.append(pair)
    return out


def spec_pair(x: Pair, path: Path) -> SpecPair:
    """A ledger row as a SpecPair: the speculative columns (validation.pairs SPEC_COLUMNS) and the measured gain
    (the ledger's after / before of a rate, or before / after of a time)."""
    r = x.cell

    def num(name: str, kind: Callable[[str], Any] = int, default: float | None = None) -> Any:
        if not r(name) and default is not None:
            return default
        try:
            return kind(r(name))
        except ValueError:
            raise BadConfig(f"{path}: line {x.line} ({x.id}): field {name}: not a number: {r(name)[:40]!r}") from None

    pair = SpecPair(
        x.id, num("ref_row", default=0), num("source_line", default=0), x.source, r("spec_method"), r("model_path"),
        r("system"), num("tp_size"), r("precision"), r("backend"), r("spec_engine") or r("backend"),
        x.concurrency, num("spec_k"), num("spec_depth", default=0), num("spec_width", default=1),
        num("spec_draft_vocab") if r("spec_draft_vocab") else None,
        num("acceptance", float) if r("acceptance") else None,
        num("context_len", float) if r("context_len") else num("isl", float),
        x.measured_gain, r("spec_kind"), r("spec_relative_to"), r("note"),
    )
    if pair.kind not in KINDS or (pair.kind in ("gain", "below") and pair.al is None):
        raise BadConfig(f"{path}: line {x.line}: spec_kind {pair.kind!r} needs one of {KINDS} (gain/below need "
                        "acceptance)")
    return pair


@dataclass(frozen=True)
class PairTerms:
    """One pair's setup priced with zero host costs: the plain decode step, the iteration, and the multipliers
    of HostCosts (sequences per iteration, drafter forwards per iteration), seconds."""

    base_s: float
    iteration_s: float
    seqs: int
    forwards: int
    al: float

    def gain(self, host: HostCosts) -> float:
        """t_base · AL / (iteration + per_seq_s · seqs + per_forward_s · forwards)."""
        return self.base_s * self.al / (self.iteration_s + host.per_seq_s * self.seqs
                                        + host.per_forward_s * self.forwards)


def _scenario(pair: SpecPair) -> Scenario:
    return Scenario.build(pair.model, pair.gpu, tp=pair.tp, quant=pair.quant, backend=pair.backend,
                          isl=max(1, int(pair.context_len)), osl=1, check_memory=False)


def pair_terms(pair: SpecPair, batch: int | None = None) -> PairTerms:
    """The pair's setup at `batch` (default the pair's) priced once (AL 1 when the row has none)."""
    shape = SpecShape(pair.method, pair.k, pair.depth, pair.width)
    b = batch or pair.batch
    g = spec_gain(_scenario(pair), shape, pair.al or 1.0, b, pair.context_len, draft_vocab=pair.draft_vocab,
                  host=HostCosts(), engine=pair.engine)
    return PairTerms(g.base_step_s, g.iteration.total_s, b, shape.draft_forwards, pair.al or 1.0)


def model_gain(pair: SpecPair, batch: int | None = None, host: HostCosts | None = None) -> float:
    """The model's gain for the pair's setup at `batch` (default the pair's) under `host` (default the fitted
    HOST_COSTS); AL 1 when the row has none (only ratios of such gains are used)."""
    return pair_terms(pair, batch).gain(host or HOST_COSTS)


Terms = dict[str, tuple[PairTerms, PairTerms | None]]  # pair id -> (its terms, its anchor's terms at anchor batch)


def all_terms(pairs: list[SpecPair]) -> Terms:
    """Every row priced once: its own terms and, for ratio rows, the anchor setup's."""
    by_id = {p.id: p for p in pairs}
    out: Terms = {}
    for p in pairs:
        anchor = None
        if p.kind == "ratio":
            a = by_id.get(p.relative_to)
            if a is None:
                raise BadConfig(f"pair {p.id}: relative_to {p.relative_to!r} is not a row id")
            anchor = pair_terms(p, a.batch)
        out[p.id] = (pair_terms(p), anchor)
    return out


def predict(pair: SpecPair, terms: Terms, by_id: dict[str, SpecPair], host: HostCosts) -> float:
    """The row's predicted gain (formula per kind in the module docstring)."""
    own, anchor = terms[pair.id]
    if anchor is not None:
        return by_id[pair.relative_to].measured * own.gain(host) / anchor.gain(host)
    return own.gain(host)


def score(pair: SpecPair, predicted: float) -> PairResult:
    """Error and ±TOLERANCE verdict of one prediction."""
    if pair.kind == "anchor":
        return PairResult(pair, predicted, None, None)
    if pair.kind == "below":
        return PairResult(pair, predicted, None, predicted < pair.measured)
    err = predicted / pair.measured - 1.0
    return PairResult(pair, predicted, err, abs(err) <= TOLERANCE)


def evaluate(pairs: list[SpecPair], host: HostCosts | None = None, terms: Terms | None = None) -> list[PairResult]:
    """Predicted gain, error and ±TOLERANCE verdict per row under `host` (default the fitted HOST_COSTS)."""
    terms = terms or all_terms(pairs)
    by_id = {p.id: p for p in pairs}
    return [score(p, predict(p, terms, by_id, host or HOST_COSTS)) for p in pairs]


def source_key(pair: SpecPair) -> str:
    """The publication a row comes from (the fold of leave-one-source-out): `E3 Tab.3` -> `E3`."""
    return pair.source.split()[0]


def share_within(results: list[PairResult]) -> tuple[int, int]:
    """(rows within ±TOLERANCE or on the right side of a bound, scored rows)."""
    scored = [r for r in results if r.within is not None]
    return sum(1 for r in scored if r.within), len(scored)
