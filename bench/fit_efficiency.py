"""Fit the performance model's efficiency factors on the dev validation rows and write
src/servescope/perfmodel/data/efficiency.toml (with how, when, on which rows and the resulting MAPE).

Usage: .venv/bin/python bench/fit_efficiency.py [CSV] [--sweeps N] [--dry-run]
Method: perfmodel.fit — MAPE of TPOT + MAPE of TTFT, TTFT-only constants (incl. the MLA per-layer prefill cost) by grid, the rest by coordinate search over a shrinking
multiplicative grid, first globally, then per (GPU generation, backend) group with >= 40 rows. Dev rows only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel.efficiency import Efficiency, default_efficiency  # noqa: E402
from servescope.perfmodel.fit import COORD_PARAMS, TTFT_PARAMS, W_TTFT, FitResult, fit_all  # noqa: E402
from servescope.perfmodel.validate import read_rows  # noqa: E402

OUT = ROOT / "src/servescope/perfmodel/data/efficiency.toml"
DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"


def _values(eff: Efficiency, base: Efficiency | None) -> list[str]:
    out = []
    for f in fields(Efficiency):
        if f.name == "source":
            continue
        v = float(getattr(eff, f.name))
        if base is None or abs(v - float(getattr(base, f.name))) > 1e-12 * max(1.0, abs(v)):
            out.append(f"{f.name} = {v:.6g}")
    return out


def _stats(r: FitResult) -> str:
    return (f"# rows {r.rows}; objective {r.objective_before:.4f} -> {r.objective_after:.4f}; "
            f"TPOT MAPE {100 * r.tpot_mape:.1f}%, TTFT MAPE {100 * r.ttft_mape:.1f}%")


def render(glob: FitResult, groups: dict[tuple[str, str], FitResult], csv_name: str, seconds: float) -> str:
    today = dt.date.today().isoformat()
    lines = [
        "# Efficiency factors of the performance model, per (GPU generation, backend).",
        f"# Written by bench/fit_efficiency.py on {today} from {csv_name} (dev rows only, aggregated serving),",
        f"# objective: MAPE(TPOT) + {W_TTFT:g} * MAPE(TTFT) (perfmodel.fit): exhaustive grid for the TTFT-only",
        f"# constants ({', '.join(TTFT_PARAMS)}), cyclic coordinate search over a shrinking multiplicative grid",
        f"# within physical bounds for {', '.join(COORD_PARAMS)}; {seconds:.0f} s.",
        "# Global fit first ([default]), then each generation.backend group with >= 40 rows starting from it and from",
        "# the previous table's values for the group (the better of the two is kept).",
        "",
        "[default]",
        _stats(glob),
        *_values(glob.efficiency, None),
        "",
    ]
    gens = sorted({g for g, _ in groups})
    for gen in gens:
        lines += [f"[{gen}]", ""]
        for (g, be), r in sorted(groups.items()):
            if g != gen:
                continue
            lines += [f"[{gen}.{be}]", _stats(r), *_values(r.efficiency, glob.efficiency), ""]
    lines += [
        "# RTX PRO 6000 (GDDR7, sm_120) has no rows in the dev set: it takes the Blackwell fit except for memory",
        "# bandwidth. aiconfigurator uses 0.8 x 1.792 TB/s (= 0.9 of the Server Edition's 1.597), LLMServingSim",
        "# calibrated 1.597 TB/s (1.0); hardware-and-models.md §1b-2b. 0.85 of 1.597 sits between (a judgement).",
        "[rtx_pro_6000_server]",
        "gemm_bw_eff = 0.85",
        "moe_bw_eff = 0.85",
        "attn_bw_eff = 0.85",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--cold", action="store_true", help="start every group from the global fit only")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = read_rows(args.csv)
    keys = {(str(r.scenario.gpu.generation), r.backend) for r in rows if r.scenario is not None}
    # the current table is a second starting point per group (coordinate search is local); --cold skips it
    warm = None if args.cold else {k: default_efficiency(*k) for k in keys}
    glob, groups = fit_all(rows, Efficiency(), sweeps=args.sweeps, warm=warm)
    text = render(glob, groups, Path(args.csv).name, time.perf_counter() - t0)
    print(text)
    if not args.dry_run:
        OUT.write_text(text + "\n", encoding="utf-8")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
