"""The plan held against the pair ledger, written where it is read: docs/plan.md and bench/RESULTS.md.

Usage: .venv/bin/python data-build/plan_ledger.py [--dry-run] [LEDGER]
(default ledger: tests/data/planner/pairs_ledger.csv). One run: every ledger row predicted by the plan's own track
(planner.pair_check.check_pairs, the same as `servescope validate --pairs`), except the speculative rows, whose
prediction is replaced by the leave-one-source-out one (validation.spec_fit.fit_report): the speculative host costs
shipped in specs/data/spec_host.toml are fitted on those very rows (data-build/fit_spec_host.py), so the shipped
prediction would be in sample. No other constant of the plan is set from any pair, so every figure written here is
out of sample. It writes, between marker comments,
  docs/plan.md       section "Checked against measured pairs": per track pairs, priced, sign hit rate, gain MAPE
                     (end to end and per kernel apart), range coverage; the overall row; the issue-28 targets; the
                     unpriced rows' reasons by count (tests/test_plan_ledger_doc.py: the block equals render());
  bench/RESULTS.md   the overall numbers and the same table, dated (a log: not tested).
Rerun it after any pricing change (the test fails until then). `--dry-run` prints the plan.md block only.
Does not: fit or tune anything (the pairs only check the plan), or price anything itself.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import textwrap
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.planner.pair_check import check_pairs  # noqa: E402
from servescope.validation.pairs import PairCheck, Summary, by_track  # noqa: E402
from servescope.validation.spec_fit import fit_report  # noqa: E402
from servescope.validation.spec_pairs import load_pairs  # noqa: E402

LEDGER = ROOT / "tests" / "data" / "planner" / "pairs_ledger.csv"
PLAN_MD = ROOT / "docs" / "plan.md"
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
BEGIN = "<!-- plan-ledger: begin (written by data-build/plan_ledger.py; do not edit by hand) -->"
END = "<!-- plan-ledger: end -->"
BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
# issue 28's targets: sign right on >= 90 % of priced pairs; MAPE <= 15 % end to end, <= 25 % per kernel;
# range coverage between 0.7 and 0.9
SIGN_MIN, MAPE_E2E_MAX, MAPE_KERNEL_MAX, COVER = 0.90, 0.15, 0.25, (0.70, 0.90)
WIDTH = 116


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False)


def checks(ledger: Path = LEDGER) -> list[PairCheck]:
    """Every row with its out-of-sample prediction (module docstring)."""
    out = check_pairs(ledger)
    oof = {r.pair.id: r.predicted for r in fit_report(load_pairs(ledger)).out_of_fold}
    return [replace(c, prediction=replace(c.prediction, gain=oof[c.pair.id],
                                          how=c.prediction.how + ", host costs refitted without the row's source"))
            if c.priced and c.pair.id in oof else c for c in out]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _row(s: Summary) -> str:
    cover = "–" if s.coverage is None else f"{_pct(s.coverage)} ({s.ranged} ranged)"
    return (f"| {s.name} | {s.rows} | {s.priced} | {_pct(s.sign_hit_rate)} | {_pct(s.mape_end_to_end)} | "
            f"{_pct(s.mape_kernel)} | {cover} |")


def _targets(total: Summary) -> str:
    def verdict(x: float | None, ok: bool) -> str:
        return "no pair scored" if x is None else ("met" if ok else "missed")

    s, e, k, c = total.sign_hit_rate, total.mape_end_to_end, total.mape_kernel, total.coverage
    return ("Issue 28's targets on all priced pairs: sign ≥ 90 % — " + verdict(s, s is not None and s >= SIGN_MIN)
            + "; MAPE ≤ 15 % end to end — " + verdict(e, e is not None and e <= MAPE_E2E_MAX)
            + "; ≤ 25 % per kernel — " + verdict(k, k is not None and k <= MAPE_KERNEL_MAX)
            + "; range coverage 0.7–0.9 — " + verdict(c, c is not None and COVER[0] <= c <= COVER[1]) + ".")


def unpriced(rows: list[PairCheck]) -> list[tuple[str, str, int]]:
    """(track, reason, rows) for the rows without a prediction, most frequent first (ties in ledger order)."""
    counts = Counter((c.pair.track, c.prediction.why_not) for c in rows if not c.priced)
    return [(t, why, n) for (t, why), n in counts.most_common()]


def table(rows: list[PairCheck]) -> list[str]:
    head = ["| track | pairs | priced | sign hit rate | gain MAPE end to end | gain MAPE per kernel | range coverage |",
            "|---|---:|---:|---:|---:|---:|---|"]
    return head + [_row(s) for s in by_track(rows)]


def render(rows: list[PairCheck], ledger: Path = LEDGER) -> str:
    """The docs/plan.md block, markers included."""
    total = by_track(rows)[-1]
    kernel = sum(not c.pair.end_to_end for c in rows)
    where = ledger.relative_to(ROOT) if ledger.is_relative_to(ROOT) else ledger
    lines = [BEGIN,
             _wrap(f"`{where}`: {total.rows} measured before/after pairs over {len({c.pair.track for c in rows})} "
                   f"tracks ({total.rows - kernel} end to end, {kernel} per kernel), each predicted by the plan's own "
                   "track at the pair's deployment and concurrency (planner/pair_check.py, as `servescope validate "
                   "--pairs`)."),
             "",
             _wrap("No constant of the plan is fitted on any pair here, so every figure is out of sample. The one "
                   "place the shipped model was fitted on ledger rows — the two speculative host costs "
                   "(specs/data/spec_host.toml, from the speculative rows) — is refitted for this table without the "
                   "predicted row's source (leave one source out, validation/spec_fit.py)."),
             "",
             *table(rows),
             "",
             _wrap("Sign hit rate and MAPE count the priced pairs (a speculative anchor is not scored; a `below` row "
                   "is sign-right under its bound and has no error); coverage counts the priced pairs whose "
                   "prediction has an 80 % range. " + _targets(total)),
             "",
             "Pairs not priced, by reason:",
             "",
             *[_wrap(f"- {n} × {t}: {why}", "  ") for t, why, n in unpriced(rows)],
             END]
    return "\n".join(lines)


def results_block(rows: list[PairCheck]) -> str:
    """The bench/RESULTS.md block: dated, the overall numbers first, then the per-track table."""
    total = by_track(rows)[-1]
    return "\n".join([
        BEGIN,
        _wrap(f"Run {dt.date.today().isoformat()}: `python data-build/plan_ledger.py` (out of sample: the "
              "speculative host costs refitted without each row's source; no other constant set from a pair)."),
        "",
        _wrap(f"Overall: {total.rows} pairs, {total.priced} priced; sign right {_pct(total.sign_hit_rate)}; gain "
              f"MAPE {_pct(total.mape_end_to_end)} end to end, {_pct(total.mape_kernel)} per kernel; range coverage "
              f"{_pct(total.coverage)} over {total.ranged} ranged pairs. " + _targets(total)),
        "",
        *table(rows),
        END])


def write(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        raise SystemExit(f"{path}: no {BEGIN!r} … {END!r} block to replace")
    path.write_text(BLOCK.sub(lambda _: block, text, count=1), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledger", nargs="?", type=Path, default=LEDGER)
    ap.add_argument("--dry-run", action="store_true", help="print the docs/plan.md block, write nothing")
    a = ap.parse_args(argv)
    rows = checks(a.ledger.resolve())
    block = render(rows, a.ledger.resolve())
    if a.dry_run:
        print(block)
        return 0
    write(PLAN_MD, block)
    write(RESULTS_MD, results_block(rows))
    print(f"wrote {PLAN_MD.relative_to(ROOT)} and {RESULTS_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
