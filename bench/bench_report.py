"""Side-by-side benchmark: `servescope report TRACE -o report.html` against `servescope trace --json TRACE` (the
issue's baseline: the HTML report may take at most 2× as long) on the same ~70 MB trace, in one run.

What it does: builds bench/out/big_trace.json with make_big_trace.py unless present (the TraceLens B200 vLLM
trace's events tiled to ~70 MB), then alternates the two commands R times, each in a fresh process under GNU time
(`/usr/bin/time -f "%e %M"`: wall seconds, peak RSS), and prints medians, the ratio and the HTML size as Markdown
for bench/RESULTS.md. With `--scenario`, a third command adds the model, calibration and plan to the report.
What it does not: run in CI, or assert (the ratio is reported, whatever it is).

    python bench/bench_report.py [--repeat 5] [--scenario]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from _side_by_side import alternate, print_table

HERE = Path(__file__).parent
OUT = HERE / "out"
BIG = OUT / "big_trace.json"
HTML = OUT / "big_report.html"
SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scenario", action="store_true", help="also time the report with the model and plan")
    args = parser.parse_args()
    if not BIG.exists():
        subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), str(BIG), "--size-mb", "70"], check=True)
    cmds = {
        "servescope trace --json": [sys.executable, "-m", "servescope", "trace", "--json", str(BIG)],
        "servescope report -o report.html": [sys.executable, "-m", "servescope", "report", str(BIG), "-o", str(HTML)],
    }
    if args.scenario:
        cmds["servescope report --model … -o report.html"] = [*cmds["servescope report -o report.html"], *SCENARIO]
    runs = alternate(cmds, args.repeat)
    print_table(runs, "servescope trace --json", args.repeat)
    print(f"\ntrace: {BIG.stat().st_size / 1e6:.1f} MB plain JSON; report: {HTML.stat().st_size / 1e6:.2f} MB HTML")
    print("raw runs (wall s, peak RSS MB): " + "; ".join(f"{k}: {v}" for k, v in runs.items()))


if __name__ == "__main__":
    main()
