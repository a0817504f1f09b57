"""Fit the performance model's global efficiency factors on the dev validation rows and write
src/servescope/perfmodel/data/efficiency.toml (how, when, on which rows, each value with its bounds).

Usage: .venv/bin/python bench/fit_efficiency.py [CSV] [--dry-run]
Method: perfmodel.fit — soft-L1 on the relative TPOT and TTFT errors, Levenberg–Marquardt over the logistic-mapped
parameters of perfmodel.fit.FITTED, one global set (no per-group sections), fitted once from the built-in defaults.
Measured numbers are not fitted: kernel_overhead_s comes from data/engine_overheads.toml (traces), memory bandwidth
and collective curves from specs/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel.efficiency import measured_kernel_overhead_s, unfitted_start  # noqa: E402
from servescope.perfmodel.fit import FITTED, SOFT_L1_S, FitResult, fit, fit_data, predict_data  # noqa: E402
from servescope.perfmodel.validate import read_rows  # noqa: E402

OUT = ROOT / "src/servescope/perfmodel/data/efficiency.toml"
DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"


def render(res: FitResult, csv_name: str, seconds: float, tpot_mape: float, ttft_mape: float) -> str:
    today = dt.date.today().isoformat()
    lines = [
        "# Global efficiency factors of the performance model (the only fitted numbers; docs/model.md §Fitted numbers).",
        f"# Written by bench/fit_efficiency.py on {today} from {csv_name} (dev rows only, aggregated serving):",
        f"# soft-L1 (scale {SOFT_L1_S:g}) on relative TPOT and TTFT errors, Levenberg-Marquardt within the bounds below,",
        f"# fitted once from the built-in defaults; {res.rows} rows, {res.iterations} iterations, {seconds:.1f} s;",
        f"# in-sample TPOT MAPE {100 * tpot_mape:.1f}%, TTFT MAPE {100 * ttft_mape:.1f}% (cross-validated: bench/RESULTS.md).",
        f"# kernel_overhead_s is measured, not fitted: {measured_kernel_overhead_s():.3g} s per kernel in a CUDA graph",
        "# (data/engine_overheads.toml); collective curves are used as measured (scales 1).",
        "",
        "[default]",
    ]
    for name, (lo, hi, rows) in FITTED.items():
        v = float(getattr(res.efficiency, name))
        note = "  AT BOUND" if name in res.at_bound else ""
        lines.append(f"{name} = {v:.6g}  # bounds [{lo:g}, {hi:g}]; set by {rows}{note}")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = fit_data(read_rows(args.csv))
    res = fit(data, unfitted_start())
    secs = time.perf_counter() - t0
    tp, tf = predict_data(data, res.efficiency)
    tpot = float(abs(tp / data.tpot_s - 1).mean())
    ttft = float(abs(tf / data.ttft_s - 1).mean())
    text = render(res, Path(args.csv).name, secs, tpot, ttft)
    print(text)
    if not args.dry_run:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
