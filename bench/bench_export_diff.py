"""Side-by-side benchmark of `servescope export` and `servescope diff` on the ~70 MB tiled trace, in one run.

What it does: builds bench/out/big_trace.json with make_big_trace.py unless present (the TraceLens B200 vLLM trace's
events tiled to ~70 MB), then alternates, R times, each in a fresh process under GNU time (`/usr/bin/time -f
"%e %M"`: wall seconds, peak RSS):
  - baseline `servescope trace --json BIG` (one analysis);
  - peer for export's copy cost: `gzip -1 -c BIG` (the bytes export must at least re-compress);
  - `servescope export BIG -o big_annotated.json.gz`;
  - `servescope diff BIG BIG --json` (two analyses, every kernel name kept).
Prints medians as Markdown for bench/RESULTS.md. What it does not: run in CI, or assert.

    python bench/bench_export_diff.py [--repeat 3]
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
ANNOTATED = OUT / "big_annotated.json.gz"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not BIG.exists():
        subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), str(BIG), "--size-mb", "70"], check=True)
    py = [sys.executable, "-m", "servescope"]
    cmds = {
        "servescope trace --json (baseline)": [*py, "trace", "--json", str(BIG)],
        "gzip -1 -c (copy cost peer)": ["gzip", "-1", "-c", str(BIG)],
        "servescope export -o x.json.gz": [*py, "export", str(BIG), "-o", str(ANNOTATED)],
        "servescope diff BIG BIG --json": [*py, "diff", str(BIG), str(BIG), "--json"],
    }
    runs = alternate(cmds, args.repeat)
    print_table(runs, "servescope trace --json (baseline)", args.repeat)
    print(f"\ntrace: {BIG.stat().st_size / 1e6:.1f} MB plain JSON; annotated: {ANNOTATED.stat().st_size / 1e6:.1f} MB gzip")
    print("raw runs (wall s, peak RSS MB): " + "; ".join(f"{k}: {v}" for k, v in runs.items()))


if __name__ == "__main__":
    main()
