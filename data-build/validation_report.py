"""Cross-validated accuracy of the performance model, from ONE run, written where it is read.

Usage: .venv/bin/python data-build/validation_report.py [CSV] [--baseline] [--dry-run] [--ranges-only]
One run: in-sample accuracy of the shipped fit (specs/data/efficiency.toml) and grouped cross-validation (refit leaving
one model / system / backend / GPU generation out, validation.crossval). From the out-of-fold errors it writes
  src/servescope/specs/data/ranges.json   10th/90th percentiles of measured/predicted per case (perfmodel/ranges.py),
                                              and `change_error`: q10/q90 of the error of a predicted TPOT ratio
                                              between two rows of one box, per case (change_error(): the planner's
                                              gain ranges)
and the same tables, cross-validated first and in-sample beside, between marker comments in README.md
(validation), docs/model.md (§6) and bench/RESULTS.md. `--baseline` also cross-validates the pre-issue-7 model
(old step physics: datasheet bandwidth, no MoE imbalance, no graph padding; the LEGACY numbers per (generation,
backend) group with >= 40 rows plus a global fit, refitted by the same fitter) — about ten minutes on two cores.
Since the first-token waves (serving.py) the baseline runs on the current serving formulas (its queue exponent is
gone), so it is no longer exactly the pre-issue-7 model; that model's numbers as measured are in bench/RESULTS.md
("Issue 7 physics", first row).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel.efficiency import backend_overrides, global_efficiency  # noqa: E402
from servescope.validation.crossval import RANGE_GROUPINGS, CvSummary, cross_validate, summarize  # noqa: E402
from servescope.validation.fit import FITTED, FitData, fit_data, predict_data  # noqa: E402
from servescope.validation.validate import read_rows  # noqa: E402

DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"
RANGES = ROOT / "src/servescope/specs/data/ranges.json"
CASE_OF = {"system_seen": "leave_one_model_out", "system_unseen": "leave_one_system_out",
           "generation_unseen": "leave_one_generation_out"}
TARGETS = {"leave_one_model_out": (0.15, 0.25), "leave_one_system_out": (0.15, 0.30)}


def quantiles(pred: np.ndarray, meas: np.ndarray) -> list[float]:
    ratio = meas / pred
    return [float(np.quantile(ratio, 0.1)), float(np.quantile(ratio, 0.9))]


CHANGE_MIN = 0.05  # pairs whose predicted change is under 5 % are left out of change_error (no change to score)
BOX_COLUMNS = ("model_path", "system", "backend", "precision", "mode")
LAYOUT_COLUMNS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "decode_tp_size",
                  "decode_pp_size", "decode_attention_dp_size", "decode_moe_tp_size", "decode_moe_ep_size")


def change_error(pred: np.ndarray, meas: np.ndarray, keys: dict[str, np.ndarray]) -> dict[str, object]:
    """Error of a predicted RATIO of two TPOTs on the same box (what the planner's gains are), out of fold.

    A box is BOX_COLUMNS (model checkpoint, system, backend, precision, mode); the two rows of a pair sit in the
    same fold of every grouping used here, so errors common to them cancel. For an ordered pair (a, b): predicted
    new/old n_p = pred_a/pred_b, measured n_m = meas_a/meas_b; the pair's error is n_m/n_p (1 = the predicted
    change was exactly right; the measured gain is the predicted one × n_p/n_m). Pairs with |1 − n_p| < CHANGE_MIN
    are skipped. `tpot`: q10/q90 of n_m/n_p over SAME-LOAD pairs — same box, concurrency and ISL/OSL, another
    parallel layout (LAYOUT_COLUMNS): one change at a fixed operating point, like a planner track.
    `tpot_any_setting`: the same over all pairs of a box (concurrency, ISL/OSL and layout may all differ).
    """
    out: dict[str, object] = {}
    for name, same_load in (("tpot", True), ("tpot_any_setting", False)):
        ratios = []
        for key in set(keys["box"].tolist()):
            idx = np.flatnonzero(keys["box"] == key)
            n_p = pred[idx][:, None] / pred[idx][None, :]
            n_m = meas[idx][:, None] / meas[idx][None, :]
            use = ~np.eye(len(idx), dtype=bool) & (np.abs(1.0 - n_p) >= CHANGE_MIN)
            if same_load:
                for k in ("load", "layout"):
                    eq = keys[k][idx][:, None] == keys[k][idx][None, :]
                    use &= eq if k == "load" else ~eq
            ratios.append((n_m / n_p)[use])
        r = np.concatenate(ratios)
        out[name] = [float(np.quantile(r, 0.1)), float(np.quantile(r, 0.9))]
        out["pairs" if same_load else "pairs_any_setting"] = int(len(r))
    return out


def change_by_size(pred: np.ndarray, meas: np.ndarray, keys: dict[str, np.ndarray]) -> list[str]:
    """Printed only: q10/q90 of measured/predicted ratio over all pairs of a box, binned by the predicted change
    |1 − n_p| — does the error of a ratio shrink with the size of the change? (docs/plan.md, Gain range)"""
    n_ps, ratios = [], []
    for key in set(keys["box"].tolist()):
        idx = np.flatnonzero(keys["box"] == key)
        n_p = pred[idx][:, None] / pred[idx][None, :]
        off = ~np.eye(len(idx), dtype=bool)
        n_ps.append(n_p[off])
        ratios.append(((meas[idx][:, None] / meas[idx][None, :]) / n_p)[off])
    change, ratio = np.abs(1.0 - np.concatenate(n_ps)), np.concatenate(ratios)
    out = []
    for lo, hi in ((0.05, 0.1), (0.1, 0.2), (0.2, 0.5), (0.5, 1.0), (1.0, 3.0), (3.0, np.inf)):
        m = (change >= lo) & (change < hi)
        q = np.quantile(ratio[m], [0.1, 0.9]) if m.any() else [np.nan, np.nan]
        out.append(f"|1-n_pred| {lo:g}-{hi:g}: {int(m.sum())} pairs, q10/q90 {q[0]:.2f}/{q[1]:.2f}")
    return out


def pair_keys(csv_path: str, data: FitData) -> dict[str, np.ndarray]:
    """Per modelled row (change_error): its box, its load (concurrency, ISL x OSL) and its parallel layout."""
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}

    def col(cols: tuple[str, ...], i: str) -> str:
        return "|".join(rows.get(i, {}).get(c, "") for c in cols)

    conc = np.asarray(data.parts.concurrency)
    return {"box": np.array([col(BOX_COLUMNS, i) or i for i in data.ids], dtype=object),
            "load": np.array([f"{conc[n]}|{col(('isl', 'osl'), i)}" for n, i in enumerate(data.ids)], dtype=object),
            "layout": np.array([col(LAYOUT_COLUMNS, i) for i in data.ids], dtype=object)}


def coverage(pred: np.ndarray, meas: np.ndarray, q: list[float]) -> float:
    return float(np.mean((meas >= pred * q[0]) & (meas <= pred * q[1])))


def baseline(data_rows: list) -> dict[str, CvSummary]:  # type: ignore[type-arg]
    """The pre-issue-7 model cross-validated (module docstring); patches the new physics out in this process."""
    import servescope.perfmodel.ops as ops
    import servescope.perfmodel.step as st
    from servescope.perfmodel.efficiency import Efficiency
    from servescope.validation.fit import LEGACY, fit_grouped

    st.padded_tokens = lambda b, t, g: (np.ones_like(t) if g else np.zeros_like(t), t)  # type: ignore[assignment,attr-defined]
    st.moe_imbalance = lambda ep, n: np.ones_like(np.asarray(n, dtype=float))  # type: ignore[assignment]
    ops.achieved_bw_bytes_per_s = lambda g: float(g.hbm_bw_bytes_per_s)  # type: ignore[assignment]
    st._CACHE.clear()  # type: ignore[attr-defined]
    d = fit_data(read_rows(DEV))
    full = fit_grouped(d, Efficiency(), LEGACY, 40)
    tp, tf = full.predict(d)
    groupings = {k: v for k, v in RANGE_GROUPINGS.items() if k != "leave_one_generation_out"}
    cv = cross_validate(d, full.glob.efficiency, LEGACY, 40, groupings, workers=2, iterations=60, by_backend=(),
                        fold_start=Efficiency())
    return {"in_sample": summarize(tp, tf, d, 0), **cv.summaries}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table(ins: CvSummary, cv: dict[str, CvSummary], cover: dict[str, tuple[float, float]],
          base: dict[str, CvSummary] | None) -> list[str]:
    head = "| evaluation | folds | rows | TPOT MAPE | TTFT MAPE | TPOT bias | TTFT bias | 80% range coverage TPOT / TTFT |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    names = {"leave_one_model_out": "**leave one model out**", "leave_one_system_out": "**leave one system (GPU) out**",
             "leave_one_backend_out": "**leave one backend out**", "leave_one_generation_out": "leave one GPU generation out"}
    for k, s in cv.items():
        c = cover.get(k)
        cov = f"{c[0]:.2f} / {c[1]:.2f}" if c else "–"
        lines.append(f"| {names[k]} | {s.folds} | {s.rows:,} | {_pct(s.tpot_mape)} | {_pct(s.ttft_mape)} | "
                     f"{_pct(s.tpot_bias)} | {_pct(s.ttft_bias)} | {cov} |")
    c = cover["in_sample"]
    lines.append(f"| in-sample (fitted on these rows) | – | {ins.rows:,} | {_pct(ins.tpot_mape)} | {_pct(ins.ttft_mape)} | "
                 f"{_pct(ins.tpot_bias)} | {_pct(ins.ttft_bias)} | {c[0]:.2f} / {c[1]:.2f} |")
    if base:
        lines += ["", "Baseline: the step physics before issue 7 with the current serving formulas (LEGACY numbers per "
                  "(generation, backend) group + global, refitted by the same fitter in the same run):", "", head.replace(" 80% range coverage TPOT / TTFT |", ""),
                  "|---|---|---|---|---|---|---|"]
        for k, s in base.items():
            lines.append(f"| {k.replace('_', ' ')} | {s.folds} | {s.rows:,} | {_pct(s.tpot_mape)} | "
                         f"{_pct(s.ttft_mape)} | {_pct(s.tpot_bias)} | {_pct(s.ttft_bias)} |")
    return lines


def verdict(cv: dict[str, CvSummary], cover: dict[str, tuple[float, float]]) -> str:
    out = []
    for k, (t_tpot, t_ttft) in TARGETS.items():
        s = cv[k]
        ok = s.tpot_mape <= t_tpot and s.ttft_mape <= t_ttft
        out.append(f"{k.replace('_', ' ')}: TPOT {_pct(s.tpot_mape)} (target ≤ {t_tpot:.0%}), TTFT {_pct(s.ttft_mape)} "
                   f"(≤ {t_ttft:.0%}) — {'met' if ok else 'NOT met'}")
    biases = [abs(getattr(s, b)) for s in cv.values() for b in ("tpot_bias", "ttft_bias")]
    out.append(f"|bias| ≤ 5%: {'met' if max(biases) <= 0.05 else 'NOT met'} (largest {_pct(max(biases))})")
    covs = [x for v in cover.values() for x in v]
    out.append(f"80% range coverage within 0.7–0.9: {'met' if min(covs) >= 0.7 and max(covs) <= 0.9 else 'NOT met'} "
               f"({min(covs):.2f}–{max(covs):.2f}; ranges come from these same out-of-fold errors, so coverage near "
               "0.8 is by construction — a check of the bookkeeping, not of transfer)")
    return "Targets (issue 7): " + "; ".join(out) + "."


def splice(path: Path, tag: str, body: list[str], anchor: str | None = None,
           by: str = "data-build/validation_report.py") -> None:
    """Replace the text between <!-- tag:begin --> and <!-- tag:end --> (or append the block after `anchor`)."""
    text = path.read_text(encoding="utf-8")
    block = f"<!-- {tag}:begin ({by}) -->\n" + "\n".join(body) + f"\n<!-- {tag}:end -->"
    pat = re.compile(rf"<!-- {tag}:begin.*?<!-- {tag}:end -->", re.S)
    if pat.search(text):
        text = pat.sub(lambda _: block, text)
    elif anchor and anchor in text:
        text = text.replace(anchor, anchor + "\n\n" + block, 1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--ranges-only", action="store_true", help="write ranges.json only, not the doc tables")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data: FitData = fit_data(read_rows(args.csv))
    start, overrides = global_efficiency(), backend_overrides()
    tp, tf = predict_data(data, start, overrides)
    ins = summarize(tp, tf, data, 0)
    cv = cross_validate(data, start, groupings=RANGE_GROUPINGS, workers=2, overrides=overrides)
    secs = time.perf_counter() - t0
    cases = {c: {"tpot": quantiles(cv.pred_tpot_s[g], data.tpot_s), "ttft": quantiles(cv.pred_ttft_s[g], data.ttft_s)}
             for c, g in CASE_OF.items()}
    seen = cases["system_seen"]
    keys = pair_keys(args.csv, data)
    change = {c: change_error(cv.pred_tpot_s[g], data.tpot_s, keys) for c, g in CASE_OF.items()}
    cover = {g: (coverage(cv.pred_tpot_s[g], data.tpot_s, cases[c]["tpot"]),
                 coverage(cv.pred_ttft_s[g], data.ttft_s, cases[c]["ttft"])) for c, g in CASE_OF.items()}
    cover["in_sample"] = (coverage(tp, data.tpot_s, seen["tpot"]), coverage(tf, data.ttft_s, seen["ttft"]))
    base = baseline([]) if args.baseline else None
    today = dt.date.today().isoformat()
    ranges = {"source": f"data-build/validation_report.py {today}: out-of-fold errors on {Path(args.csv).name} "
                        f"({len(data.tpot_s)} rows); q10/q90 of measured/predicted",
              "cases": cases,
              "change_error_doc": "per case: q10/q90 of measured/predicted RATIO n = TPOT_a/TPOT_b of two rows of "
                                  "one box (model, system, backend, precision, mode), out of fold (both rows in the "
                                  "same fold); tpot: same concurrency and ISL/OSL, another parallel layout; "
                                  "tpot_any_setting: all pairs of a box; pairs with |1 - n_pred| < 0.05 skipped. "
                                  "The planner's gain ranges (data-build/validation_report.py change_error)",
              "change_error": change, "systems": sorted(set(data.labels["system"])),
              "generations": sorted(set(data.labels["generation"])), "vendors": sorted(set(data.labels["vendor"]))}
    body = [f"Cross-validated first (refit without the held-out group, then predict it), in-sample beside; "
            f"{len(data.tpot_s):,} modelled aggregated rows of tests/data/validation/measured_serving_dev.csv, "
            f"one global fit of {len(FITTED)} numbers (docs/model.md §4). Generated by `data-build/validation_report.py` on {today} "
            f"({secs:.0f} s for the fit evaluation and {sum(s.folds for s in cv.summaries.values())} folds on 2 "
            "worker processes); bias = mean (predicted − measured)/measured.", "",
            *table(ins, cv.summaries, cover, base), "", verdict(cv.summaries, cover)]
    print("\n".join(body))
    print("change_error (planner gain ranges):", json.dumps(change))
    print("system_seen ratio error by predicted change:",
          "; ".join(change_by_size(cv.pred_tpot_s["leave_one_model_out"], data.tpot_s, keys)))
    if args.ranges_only and not args.dry_run:
        RANGES.write_text(json.dumps(ranges, indent=1) + "\n", encoding="utf-8")
        print("wrote ranges.json only")
        return
    if args.dry_run:
        return
    RANGES.write_text(json.dumps(ranges, indent=1) + "\n", encoding="utf-8")
    splice(ROOT / "README.md", "validation", body)
    splice(ROOT / "docs/model.md", "validation", body, anchor="## 6. Validation table (dev rows, after the fit)")
    splice(ROOT / "bench/RESULTS.md", "validation", ["## Model accuracy, cross-validated (issue 7)", "", *body])
    print("wrote ranges.json, README.md, docs/model.md, bench/RESULTS.md")


if __name__ == "__main__":
    main()
