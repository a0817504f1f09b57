"""Speculative decoding: predicted vs measured gains on the published pairs, written into docs/plan.md.

Usage: .venv/bin/python bench/bench_speculative.py [--check]
Reads tests/data/planner/spec_pairs.csv (each row cites its line in the bundled copy of
speculative-decoding-measured.md), prices every row once (validation.spec_pairs), fits the speculative model's two
host costs on all rows and again leaving each source out (validation.spec_fit), and replaces the block between
`<!-- spec-pairs:begin -->` and `<!-- spec-pairs:end -->` in docs/plan.md with the table (cross-validated first,
in-sample beside it), the counts, and the reference box (Kimi-K2.5 INT4 experts, 8× RTX PRO 6000 Server, TP=8,
EAGLE-3 k=3, per-position acceptance 0.645/0.393/0.240) at concurrency 1 and 128. It also recomputes the
host-sync constant of perfmodel.speculative (median synchronous D2H copy) from the SGLang trace in
/work/shared/traces when present.
The fit is the same one data-build/fit_spec_host.py writes to src/servescope/specs/data/spec_host.toml (the
planner's speculative gain ranges read it; this script writes no data file). The reference box is priced with that
shipped file, so after a change to the model run data-build/fit_spec_host.py first, then this script.
`--check` prints and writes nothing. Accuracy only: no timing claims.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel import Scenario  # noqa: E402
from servescope.perfmodel.speculative import HOST_SYNC_S, HostCosts  # noqa: E402
from servescope.validation.spec_fit import BOUNDS, FitReport, fit_report  # noqa: E402
from servescope.validation.spec_pairs import (  # noqa: E402
    TOLERANCE,
    PairResult,
    all_terms,
    evaluate,
    load_pairs,
    share_within,
)

PAIRS = ROOT / "tests" / "data" / "planner" / "pairs_ledger.csv"
DOC = ROOT / "docs" / "plan.md"
BEGIN, END = "<!-- spec-pairs:begin -->", "<!-- spec-pairs:end -->"
SYNC_TRACE = Path("/work/shared/traces/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
KIMI_ACCEPTANCE = (0.645, 0.393, 0.240)


def _cell(r: PairResult) -> str:
    err = "" if r.error is None else f" ({100 * r.error:+.0f}%)"
    mark = {None: "", True: " ✓", False: " ✗"}[r.within]
    return f"{r.predicted:.2f}{err}{mark}"


def _counts(results: list[PairResult]) -> str:
    within, scored = share_within(results)
    hi = [r for r in results if r.within is not None and r.pair.batch >= 16]
    return f"{within} of {scored} ({sum(1 for r in hi if r.within)} of {len(hi)} at batch ≥ 16)"


def _pairs_table(rep: FitReport, unfitted: list[PairResult]) -> list[str]:
    lines = [
        "| id | source (ref row, line) | setup | batch | k | AL | measured | predicted, cross-validated | "
        "predicted, in-sample |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ins, cv in zip(rep.in_sample, rep.out_of_fold, strict=True):
        p = ins.pair
        setup = f"{p.method} {p.model} {p.tp}×{p.gpu} {p.backend}"
        measured = f"< {p.measured:.2f}" if p.kind == "below" else f"{p.measured:.3g}"
        measured += {"ratio": " (ratio)", "anchor": " (anchor)"}.get(p.kind, "")
        lines.append(f"| {p.id} | {p.source} ({p.ref_row}, {p.source_line}) | {setup} | {p.batch} | {p.k} | "
                     f"{p.al if p.al else 'n/s'} | {measured} | {_cell(cv)} | {_cell(ins)} |")
    h, folds = rep.host, rep.fold_hosts
    lo_s, hi_s = min(f.per_seq_s for f in folds.values()), max(f.per_seq_s for f in folds.values())
    lo_f, hi_f = min(f.per_forward_s for f in folds.values()), max(f.per_forward_s for f in folds.values())
    q10, q90 = rep.ratio_q
    lines += [
        "", f"Within ±{TOLERANCE:.0%}, **cross-validated (leave one source out, {len(folds)} sources): "
        f"{_counts(rep.out_of_fold)}** scored rows, mean |error| {100 * rep.mape:.1f}%; in-sample "
        f"{_counts(rep.in_sample)}, mean |error| {100 * rep.mape_in_sample:.1f}%. Without the two fitted host "
        f"costs (engine counts from the code only): {_counts(unfitted)}, mean |error| {100 * _mape(unfitted):.1f}%.",
        f"Fitted host costs (all rows): per sequence {h.per_seq_s * 1e6:.0f} µs, per drafter forward "
        f"{h.per_forward_s * 1e3:.2f} ms (bounds {BOUNDS['per_seq_s'][1] * 1e6:.0f} µs, "
        f"{BOUNDS['per_forward_s'][1] * 1e3:.0f} ms); across the folds {lo_s * 1e6:.0f}–{hi_s * 1e6:.0f} µs and "
        f"{lo_f * 1e3:.2f}–{hi_f * 1e3:.2f} ms. Out-of-fold measured/predicted gain: q10 {q10:.3f}, q90 {q90:.3f} "
        "(the planner's speculative gain range).",
    ]
    return lines


def _mape(results: list[PairResult]) -> float:
    errs = [abs(r.error) for r in results if r.error is not None]
    return sum(errs) / len(errs)


def _kimi() -> list[str]:
    from servescope.planner import SpecConfig, plan

    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16")
    spec = SpecConfig("eagle3", k=3, acceptance=KIMI_ACCEPTANCE)
    out = []
    for c in (1, 128):
        t = plan(sc, concurrency=c, spec=spec).track("speculative_decoding")
        out.append(f"- concurrency {c}: {t.gain:.2f}x ({t.gain_low:.2f}–{t.gain_high:.2f}); {t.note}")
    return out


def _host_sync_us() -> str:
    if not SYNC_TRACE.exists():
        return f"host sync constant {HOST_SYNC_S * 1e6:.1f} µs (trace not present here to recompute)"
    from servescope.trace import load_trace

    ev = load_trace(SYNC_TRACE).events
    durs = [float(d) for n, k, d in zip(ev["name"], ev["kind"], ev["dur_us"], strict=True)
            if k == "runtime" and n in ("hipMemcpyWithStream", "cudaMemcpy")]
    med = statistics.median(durs) if durs else float("nan")
    return (f"host sync: median synchronous D2H copy {med:.1f} µs over {len(durs)} calls in "
            f"{SYNC_TRACE.name} (constant in perfmodel.speculative: {HOST_SYNC_S * 1e6:.1f} µs)")


def main() -> None:
    pairs = load_pairs(PAIRS)
    terms = all_terms(pairs)
    rep = fit_report(pairs, terms)
    unfitted = evaluate(pairs, HostCosts(), terms)
    check = "--check" in sys.argv
    block = [BEGIN, "", *_pairs_table(rep, unfitted), "", "Reference box (Kimi-K2.5 INT4 experts, 8× RTX PRO 6000 Server, "
             "TP=8, EAGLE-3 k=3, acceptance 0.645/0.393/0.240), shipped efficiencies and host costs:", *_kimi(), "",
             f"Generated by `bench/bench_speculative.py`; {_host_sync_us()}.", "", END]
    text = "\n".join(block)
    if check:
        print(text)
        return
    doc = DOC.read_text(encoding="utf-8")
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    DOC.write_text(doc, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
