"""Fit the performance model's global efficiency factors on the dev validation rows and write
src/servescope/specs/data/efficiency.toml (how, when, on which rows, each value with its bounds).

Usage: .venv/bin/python data-build/fit_efficiency.py [CSV] [--dry-run]
Method: validation.fit — soft-L1 on the relative TPOT and TTFT errors, Levenberg–Marquardt over the logistic-mapped
parameters of validation.fit.FITTED, one global set (no per-group sections), fitted once from the built-in defaults.
Measured numbers are not fitted: kernel_overhead_s comes from specs/data/engine_overheads.toml (traces), memory bandwidth
and collective curves from specs/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel.efficiency import measured_kernel_overhead_s, unfitted_start  # noqa: E402
from servescope.validation.fit import (  # noqa: E402
    BY_BACKEND,
    FITTED,
    MIN_MODELS_OVERRIDE,
    SHRINK_TAU_Z,
    SOFT_L1_S,
    FitResult,
    fit,
    fit_data,
    predict_data,
)
from servescope.validation.validate import read_rows  # noqa: E402

OUT = ROOT / "src/servescope/specs/data/efficiency.toml"
DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"


def render(res: FitResult, csv_name: str, seconds: float, tpot_mape: float, ttft_mape: float) -> str:
    today = dt.date.today().isoformat()
    lines = [
        "# Global efficiency factors of the performance model (the only fitted numbers; docs/model.md §Fitted numbers).",
        f"# Written by data-build/fit_efficiency.py on {today} from {csv_name} (dev rows only, aggregated serving):",
        f"# soft-L1 (scale {SOFT_L1_S:g}) on relative TPOT and TTFT errors, Levenberg-Marquardt within the bounds below,",
        "# fitted from the built-in defaults in two stages (validation.fit.fit): every number with the measured per-op",
        "# curves off (the roofline path: the kernel-class efficiencies price whole classes there), then the curves on",
        f"# and the numbers other than the kernel-class efficiencies and launch_overhead_s refitted; {res.rows} rows, {res.iterations} iterations, {seconds:.1f} s;",
        f"# in-sample TPOT MAPE {100 * tpot_mape:.1f}%, TTFT MAPE {100 * ttft_mape:.1f}% (cross-validated: bench/RESULTS.md).",
        f"# kernel_overhead_s is measured, not fitted: {measured_kernel_overhead_s():.3g} s per kernel in a CUDA graph",
        "# (specs/data/engine_overheads.toml); collective curves are used as measured (scales 1).",
        "",
        "[default]",
    ]
    for name, (lo, hi, rows) in FITTED.items():
        v = float(getattr(res.efficiency, name))
        note = "  AT BOUND" if name in res.at_bound else ""
        lines.append(f"{name} = {v:.6g}  # bounds [{lo:g}, {hi:g}]; set by {rows}{note}")
    lines.append("")
    if res.roofline is not None:
        lines += ["# The first stage (every number with the curves off): prices a GPU without measured per-op curves",
                  "# (perfmodel.efficiency.roofline_efficiency; the staged [default] is fitted with the curves on).",
                  "[roofline]"]
        lines += [f"{name} = {float(getattr(res.roofline, name)):.6g}" for name in FITTED]
        lines.append("")
    lines += [] if not res.overrides else [f"# Per-backend numbers (engines with rows of >= {MIN_MODELS_OVERRIDE} models), fitted jointly with [default] as",
              f"# offsets in logistic space shrunk toward it (normal prior, scale {SHRINK_TAU_Z:g}); set by that engine's rows."]
    for backend, vals in sorted(res.overrides.items()):
        lines.append(f"[backend.{backend}]")
        lines += [f"{k} = {float(v):.6g}" for k, v in vals.items()]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    data = fit_data(read_rows(args.csv))
    res = fit(data, unfitted_start(), by_backend=BY_BACKEND)
    secs = time.perf_counter() - t0
    tp, tf = predict_data(data, res.efficiency, res.overrides)
    tpot = float(abs(tp / data.tpot_s - 1).mean())
    ttft = float(abs(tf / data.ttft_s - 1).mean())
    text = render(res, Path(args.csv).name, secs, tpot, ttft)
    print(text)
    if not args.dry_run:
        OUT.write_text(text, encoding="utf-8")
        splice_doc(res, tpot, ttft)
        print(f"wrote {OUT.relative_to(ROOT)} and the fitted-numbers table in docs/model.md")


def splice_doc(res: FitResult, tpot_mape: float, ttft_mape: float) -> None:
    """The fitted numbers (value, bounds, the rows that set each, at-bound notes) between markers in docs/model.md."""
    lines = [f"{len(FITTED)} global numbers, fitted once on {res.rows:,} dev rows ({res.iterations} iterations; in-sample "
             f"TPOT {100 * tpot_mape:.1f}%, TTFT {100 * ttft_mape:.1f}%). Generated by `data-build/fit_efficiency.py`.", "",
             "| number | value | bounds | set by | note |", "|---|---|---|---|---|"]
    for name, (lo, hi, rows) in FITTED.items():
        note = AT_BOUND_NOTES.get(name, "at its bound") if name in res.at_bound else ""
        lines.append(f"| `{name}` | {float(getattr(res.efficiency, name)):.4g} | [{lo:g}, {hi:g}] | {rows} | {note} |")
    for backend, vals in sorted(res.overrides.items()):
        for name, v in vals.items():
            lo, hi, rows = FITTED[name]
            lines.append(f"| `{name}` [{backend}] | {float(v):.4g} | [{lo:g}, {hi:g}] | {rows}, {backend} rows only; "
                         f"shrunk toward the global value | engine override ({MIN_MODELS_OVERRIDE}+ models) |")
    n_total = len(FITTED) + sum(len(v) for v in res.overrides.values())
    lines.insert(1, f"\n{n_total} fitted numbers in all ({len(FITTED)} global + "
                    f"{n_total - len(FITTED)} per-engine offsets of {', '.join(BY_BACKEND)}).")
    doc = ROOT / "docs/model.md"
    text = doc.read_text(encoding="utf-8")
    block = "<!-- fitted:begin (data-build/fit_efficiency.py) -->\n" + "\n".join(lines) + "\n<!-- fitted:end -->"
    pat = re.compile(r"<!-- fitted:begin.*?<!-- fitted:end -->", re.S)
    text = pat.sub(lambda _: block, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text, encoding="utf-8")


# Why a number may sit at its bound (written next to it in docs/model.md).
AT_BOUND_NOTES = {
    "moe_bw_eff": "expert weight reads reach the GPU's achieved bandwidth (the measured ceiling): the bound is physical",
    "gemm_bw_eff": "dense weight reads reach the achieved bandwidth: the bound is physical",
    "cpu_overhead_per_seq_s": "no per-sequence CPU cost is visible beyond the roofline terms: 0 in effect",
    "linear_prefill_layer_s": "only Qwen3.5 rows have linear-attention layers; their TTFT wants more than 4 ms per "
                              "layer (the prefill of gated delta-net layers is under-modelled); left at the bound",
    "attn_compute_eff": "at the upper bound: prefill attention as counted (causal, L0 + (t+1)/2 keys per query) runs "
                        "faster than 95 % of peak would allow — an over-count in the attention FLOP model (MLA "
                        "prefill, FP8 attention on Blackwell), not a real efficiency; left at the bound",
    "ttft_queue_frac": "at its bound",
}


if __name__ == "__main__":
    main()
