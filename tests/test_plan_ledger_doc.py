"""docs/plan.md's "Checked against measured pairs" block is what data-build/plan_ledger.py writes today.

The block is the plan held against the pair ledger (tests/data/planner/pairs_ledger.csv). Like the README's examples
(data-build/doc_examples.py, tests/test_docs_examples.py) it must not drift: a pricing change or a new ledger row
fails this test until `python data-build/plan_ledger.py` is rerun — never fix it by editing the block by hand.
The other tests check what the script computes against quantities derived here by another route.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench_scripts import bench_script

plan_ledger = bench_script("plan_ledger")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    return plan_ledger.checks()


def test_the_plan_md_block_equals_what_the_script_writes(rows) -> None:  # type: ignore[no-untyped-def]
    text = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")
    found = plan_ledger.BLOCK.findall(text)
    assert len(found) == 1, "docs/plan.md needs exactly one plan-ledger block"
    head = text.index("\n## Checked against measured pairs\n")
    assert head < text.index(plan_ledger.BEGIN) < text.find("\n## ", head + 1)  # the block sits in its section
    assert found[0] == plan_ledger.render(rows), "stale: run python data-build/plan_ledger.py"


def test_every_ledger_row_is_in_the_table_once(rows) -> None:  # type: ignore[no-untyped-def]
    with (ROOT / "tests" / "data" / "planner" / "pairs_ledger.csv").open(newline="", encoding="utf-8") as fh:
        raw = list(csv.DictReader(fh))
    assert [c.pair.id for c in rows] == [r["id"] for r in raw]
    per_track: dict[str, int] = {}
    for r in raw:
        per_track[r["track"]] = per_track.get(r["track"], 0) + 1
    block = plan_ledger.render(rows)
    for track, n in per_track.items():
        assert f"| {track} | {n} | " in block
    assert f"| all | {len(raw)} | " in block
    # the unpriced reasons account for every row without a prediction
    assert sum(n for _, _, n in plan_ledger.unpriced(rows)) == sum(not c.priced for c in rows)


def test_the_speculative_rows_are_predicted_without_their_own_source(rows) -> None:  # type: ignore[no-untyped-def]
    """The shipped host costs are fitted on the speculative rows; the table must use, for each row, the fit that
    left the row's publication out — recomputed here with the fold's host costs through spec_pairs.evaluate."""
    from servescope.validation.spec_fit import fit_report
    from servescope.validation.spec_pairs import evaluate, load_pairs, source_key

    spec = load_pairs(ROOT / "tests" / "data" / "planner" / "pairs_ledger.csv")
    rep = fit_report(spec)
    by_id = {c.pair.id: c for c in rows}
    shipped = {r.pair.id: r.predicted for r in evaluate(spec)}
    moved = 0
    for src, host in rep.fold_hosts.items():
        for r in evaluate(spec, host):
            if source_key(r.pair) != src or r.pair.kind == "anchor":
                continue
            assert by_id[r.pair.id].prediction.gain == pytest.approx(r.predicted, rel=1e-12)
            moved += abs(r.predicted - shipped[r.pair.id]) > 1e-6
    assert moved > 0  # the refit changes some predictions: the in-sample ones are not what the table shows


def test_the_targets_line_follows_the_numbers() -> None:
    from servescope.validation.pairs import Summary

    good = Summary("all", 10, 10, 0.95, 0.05, 0.05, 0.10, 10, 0.8)
    bad = Summary("all", 10, 10, 0.85, 0.20, 0.20, None, 10, 0.95)
    assert plan_ledger._targets(good).count("— met") == 4
    line = plan_ledger._targets(bad)
    assert line.count("— missed") == 3 and "per kernel — no pair scored" in line
