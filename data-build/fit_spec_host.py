"""Fit the speculative model's two host costs on the published pairs and write src/servescope/specs/data/spec_host.toml.

Usage: .venv/bin/python data-build/fit_spec_host.py [--dry-run]
Reads tests/data/planner/spec_pairs.csv (each row cites its line in the bundled copy of
speculative-decoding-measured.md), prices every row once (validation.spec_pairs), fits the two host costs of
perfmodel.speculative.HostCosts on all rows and again leaving each source out (validation.spec_fit), and writes
the fit and the out-of-fold error quantiles of the gain to spec_host.toml (the planner's speculative gain ranges
read them). `--dry-run` prints the file and writes nothing.
What it does not: write the table of predicted vs measured gains in docs/plan.md — bench/bench_speculative.py
does (the same fit, rerun there; its reference box reads the file this script writes, so run this one first).
"""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.validation.spec_fit import BOUNDS, FitReport, fit_report  # noqa: E402
from servescope.validation.spec_pairs import all_terms, load_pairs, source_key  # noqa: E402

PAIRS = ROOT / "tests" / "data" / "planner" / "pairs_ledger.csv"
HOST_TOML = ROOT / "src" / "servescope" / "specs" / "data" / "spec_host.toml"


def host_toml(rep: FitReport) -> str:
    h, (q10, q90) = rep.host, rep.ratio_q
    scored = [r for r in rep.out_of_fold if r.error is not None]
    sources = sorted({source_key(r.pair) for r in rep.out_of_fold})
    return "\n".join([
        "# The speculative model's fitted numbers (perfmodel.speculative.HostCosts) and its cross-validated error.",
        f"# Written by data-build/fit_spec_host.py on {date.today().isoformat()} from tests/data/planner/pairs_ledger.csv:",
        "# least squares on log(predicted/measured gain) over the scored rows (validation/spec_fit.py); docs/plan.md",
        "# lists the rows, the in-sample and the leave-one-source-out predictions.",
        "",
        "[host]",
        f"per_seq_s = {h.per_seq_s:.6g}  # bounds [0, {BOUNDS['per_seq_s'][1]:g}]; set by the fall of the gain with "
        "batch (E3 SGLang/vLLM, SDB bs 1 -> 32)",
        f"per_forward_s = {h.per_forward_s:.6g}  # bounds [0, {BOUNDS['per_forward_s'][1]:g}]; set by batch-1 rows "
        "with many drafter forwards (V20780 k=4, SDB/S4716 trees)",
        "",
        "[error]  # measured / predicted gain, out of fold (leave one source out), gain and ratio rows",
        f"q10 = {q10:.4f}",
        f"q90 = {q90:.4f}",
        f"rows = {len(scored)}",
        f"sources = {len(sources)}  # {', '.join(sources)}",
        "",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the data file")
    args = ap.parse_args()
    pairs = load_pairs(PAIRS)
    text = host_toml(fit_report(pairs, all_terms(pairs)))
    print(text)
    if not args.dry_run:
        HOST_TOML.write_text(text, encoding="utf-8")
        print(f"wrote {HOST_TOML.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
