"""How low can TPOT / TTFT MAPE go on the dev CSV? Two measured floors, written to bench/RESULTS.md.

Usage: .venv/bin/python bench/error_floor.py [CSV] [--dry-run]

1. Repeat floor (model-free, a hard lower bound). Rows of the CSV whose recorded set-up is identical — every column
   except id, source and the two measured values, plus `silicon_concurrency` from the source — yet whose
   measurements differ cannot all be predicted exactly by any model that reads only those columns. For each such
   set-up the best single prediction under MAPE is the weighted median of its measurements (weights 1/x); the
   floor is the MAPE that prediction leaves, over all modelled rows (rows measured once count 0).
2. Level oracles (a diagnostic of THIS model, not a bound on every model). The model's predictions — in-sample
   (shipped fit) and out of fold (leave one model / system out, every fold refitted from the built-in defaults as
   `validate --cv` does) — each multiplied by the MAPE-optimal factor of its group, chosen on the rows themselves
   (weighted median of measured/predicted, weights predicted/measured): per model, per (model, backend), per
   deployment (set-up without ISL/OSL/concurrency), per series (deployment + ISL/OSL). What is left is error
   within the group — the model's shape across the group's rows. If even the per-model oracle misses a
   leave-one-model-out target, no global level, bias or per-model constant reaches it: the error is between
   deployments of one model (layout, system, engine version, unrecorded server settings) or in the shape.
What it does not do: change the model or its fit.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "data-build"))  # the marker-block splice of data-build/validation_report.py

from validation_report import splice  # noqa: E402

from servescope.perfmodel.efficiency import backend_overrides, global_efficiency, unfitted_start  # noqa: E402
from servescope.validation.crossval import GROUPINGS, cross_validate  # noqa: E402
from servescope.validation.fit import FitData, fit_data, predict_data  # noqa: E402
from servescope.validation.validate import read_rows  # noqa: E402

DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"
MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")
NOT_SETUP = ("id", "silicon_data_source", *MEASURED)
LOAD = ("isl", "osl")
SAME = 1.01  # measurements within 1 % of each other are copies of one result (some sources round to 0.01 ms)


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)])


def setup_keys(csv_path: str | Path, ids: Sequence[str]) -> dict[str, np.ndarray]:
    """Per modelled row: its full recorded set-up, its deployment (no ISL/OSL/concurrency) and its series."""
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    cols = [c for c in next(iter(rows.values())) if c not in NOT_SETUP]
    deploy_cols = [c for c in cols if c not in (*LOAD, "batch_size", "prefill_batch_size", "decode_batch_size")]

    def conc(r: dict[str, str]) -> str:
        m = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
        return m.group(1) if m else r["batch_size"]

    def key(i: str, names: list[str], load: bool) -> str:
        r = rows[i]
        return "|".join([*(r[c] for c in names), *((conc(r), r["isl"], r["osl"]) if load else ())])

    return {"setup": np.array([key(i, cols, True) for i in ids], dtype=object),
            "deployment": np.array([key(i, deploy_cols, False) for i in ids], dtype=object),
            "series": np.array([key(i, deploy_cols, False) + "|" + rows[i]["isl"] + "|" + rows[i]["osl"]
                                for i in ids], dtype=object)}


def repeat_floor(meas: np.ndarray, setup: np.ndarray) -> tuple[float, int, np.ndarray]:
    """(floor MAPE over all rows, set-ups measured more than once with results > 1 % apart, their max/min)."""
    err, ratios = np.zeros(len(meas)), []
    groups: dict[str, list[int]] = defaultdict(list)
    for n, k in enumerate(setup):
        groups[k].append(n)
    for idx in groups.values():
        x = meas[idx]
        if len(idx) < 2 or x.max() <= SAME * x.min():  # one measurement, or copies rounded differently
            continue
        best = weighted_median(x, 1 / x)
        err[idx] = np.abs(best - x) / x
        ratios.append(x.max() / x.min())
    return float(err.mean()), len(ratios), np.array(ratios)


def oracle_mape(pred: np.ndarray, meas: np.ndarray, labels: np.ndarray) -> tuple[float, int]:
    """MAPE after each group's predictions are scaled by the factor that minimises the group's own MAPE."""
    err = np.empty(len(meas))
    groups: dict[str, list[int]] = defaultdict(list)
    for n, k in enumerate(labels):
        groups[str(k)].append(n)
    for idx in groups.values():
        p, x = pred[idx], meas[idx]
        f = weighted_median(x / p, p / x)
        err[idx] = np.abs(f * p - x) / x
    return float(err.mean()), len(groups)


CLASS_COLUMNS = ("backend", "system", "precision", "tp_size", "moe_ep_size", "attention_dp_size", "backend_version")


def factor_classes(pred: np.ndarray, meas: np.ndarray, keys: dict[str, np.ndarray], csv_path: str | Path,
                   ids: Sequence[str]) -> list[str]:
    """Each deployment's oracle factor (measured/predicted), averaged in log over rows per value of a recorded
    column, with the spread inside that value: does a recorded column explain the deployments' levels?"""
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    groups: dict[str, list[int]] = defaultdict(list)
    for n, k in enumerate(keys["deployment"]):
        groups[k].append(n)
    log_f = np.empty(len(meas))
    for idx in groups.values():
        log_f[idx] = np.log(weighted_median(meas[idx] / pred[idx], pred[idx] / meas[idx]))
    out = []
    for col in CLASS_COLUMNS:
        values = np.array([rows[i][col] or "-" for i in ids], dtype=object)
        cells = []
        for v in sorted(set(values), key=lambda v: -int(np.sum(values == v)))[:8]:
            m = values == v
            cells.append(f"{v} n{int(m.sum())} x{np.exp(log_f[m].mean()):.2f} ±{log_f[m].std():.2f}")
        out.append(f"{col}: " + "; ".join(cells))
    return out


def osl_slopes(csv_path: str | Path) -> list[str]:
    """Measured rows only: within each (backend, version, model, system, layout, ISL, concurrency) measured at
    several output lengths, the slope of TTFT against osl·TPOT/c (one mean inter-completion interval of a closed
    loop); median per (backend, model, system). ~0 where TTFT does not depend on the output length."""
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "agg"]
    series: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        m = re.search(r"silicon_concurrency=(\d+)", r["silicon_data_source"])
        c = m.group(1) if m else r["batch_size"]
        series[(r["backend"], r["model_path"], r["system"], r["backend_version"], r["precision"], r["tp_size"],
                r["moe_ep_size"], r["attention_dp_size"], r["isl"], c)].append(r)
    by: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for k, rs in series.items():
        x = np.array([float(r["osl"]) * float(r["silicon_tpot_ms"]) / float(k[-1]) for r in rs])
        y = np.array([float(r["silicon_ttft_ms"]) for r in rs])
        if len(rs) >= 2 and np.ptp(x) > 0 and float(k[-1]) <= 32:
            slope = np.cov(x, y, bias=True)[0, 1] / np.var(x)  # least-squares slope
            by[k[:3]].append(float(slope))
    return [f"{b} {m} {s}: {len(v)} series, median slope {np.median(v):.2f} (range {min(v):.2f} to {max(v):.2f})"
            for (b, m, s), v in sorted(by.items()) if len(v) >= 3]


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - meas) / meas))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def run(csv_path: str, factors: bool = False) -> list[str]:
    t0 = time.perf_counter()
    data: FitData = fit_data(read_rows(csv_path))
    keys = setup_keys(csv_path, data.ids)
    tp, tf = predict_data(data, global_efficiency(), backend_overrides())
    groupings = {k: GROUPINGS[k] for k in ("leave_one_model_out", "leave_one_system_out")}
    cv = cross_validate(data, global_efficiency(), groupings=groupings, workers=2, fold_start=unfitted_start())
    preds = {"in-sample": (tp, tf), **{g: (cv.pred_tpot_s[g], cv.pred_ttft_s[g]) for g in groupings}}
    lab = data.labels
    by: dict[str, Callable[[], np.ndarray]] = {
        "per model": lambda: lab["model"],
        "per (model, backend)": lambda: np.array([f"{m}|{b}" for m, b in zip(lab["model"], lab["backend"],
                                                                              strict=True)], dtype=object),
        "per deployment": lambda: keys["deployment"],
        "per series (deployment, ISL/OSL)": lambda: keys["series"],
    }
    n = len(data.tpot_s)
    today = dt.date.today().isoformat()
    head = ["| predictions | scaled | groups | " + " | ".join(f"TPOT {p} | TTFT {p}" for p in ("MAPE",)) + " |",
            "|---|---|---|---|---|"]
    lines = []
    for name, (pt, pf) in preds.items():
        lines.append(f"| {name} | not scaled (as shipped / as cross-validated) | – | {_pct(mape(pt, data.tpot_s))} | "
                     f"{_pct(mape(pf, data.ttft_s))} |")
        for gname, labels in by.items():
            (a, g), (b, _) = oracle_mape(pt, data.tpot_s, labels()), oracle_mape(pf, data.ttft_s, labels())
            lines.append(f"| {name} | {gname} | {g} | {_pct(a)} | {_pct(b)} |")
    floors = {w: repeat_floor(m, keys["setup"]) for w, m in (("TPOT", data.tpot_s), ("TTFT", data.ttft_s))}
    rep = []
    for w, (fl, k, ratios) in floors.items():
        q = np.quantile(ratios, [0.5, 0.75, 0.9]) if len(ratios) else [np.nan] * 3
        rep.append(f"{w}: {k} set-ups measured more than once with results more than 1 % apart (max/min of their "
                   f"measurements: median {q[0]:.2f}, 75th percentile {q[1]:.2f}, 90th {q[2]:.2f}); floor "
                   f"**{_pct(fl)}** over all {n:,} rows")
    if factors:
        for w, (pred, meas) in (("TPOT", (cv.pred_tpot_s["leave_one_model_out"], data.tpot_s)),
                                ("TTFT", (cv.pred_ttft_s["leave_one_model_out"], data.ttft_s))):
            print(f"{w} per-deployment factor by recorded column (x = exp mean log, ± = sd of log):")
            print("\n".join("  " + line for line in factor_classes(pred, meas, keys, csv_path, data.ids)))
        print("TTFT against osl x TPOT / c at concurrency <= 32 (measured rows only):")
        print("\n".join("  " + line for line in osl_slopes(csv_path)))
    secs = time.perf_counter() - t0
    return [f"Generated by `bench/error_floor.py` on {today} ({secs:.0f} s; {n:,} modelled rows of "
            f"{Path(csv_path).name}; cross-validated folds refitted from the built-in defaults).", "",
            "**Repeat floor** (a hard bound for any model that reads only the CSV's columns): "
            + "; ".join(rep) + ".", "",
            "**Level oracles** (each group's predictions scaled by the factor that best fits that group's own "
            "measured rows — information no prediction has; what remains is error inside the group):", "",
            *head, *lines]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--factors", action="store_true",
                    help="also print the per-deployment factors (leave one model out) by recorded column")
    args = ap.parse_args()
    body = run(args.csv, args.factors)
    print("\n".join(body))
    if not args.dry_run:
        splice(ROOT / "bench/RESULTS.md", "error_floor",
               ["## How low can the error go? Repeat floor and level oracles (issues 7, 8)", "", *body],
               anchor="<!-- validation:end -->", by="bench/error_floor.py")
        print("wrote bench/RESULTS.md")


if __name__ == "__main__":
    main()
