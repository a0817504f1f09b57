"""Peak memory of `servescope trace --json` on a 1 GB trace, with and without the CLI's allocator setting (issue 9).

What it does: builds bench/out/big1g_trace.json (make_big_trace.py --size-mb 1000: the B200 vLLM trace's events
repeated with fresh ids and time offsets, ~1,012 MB, ~3.6 M events) unless present, then alternates two runs R
times, each a fresh process under GNU time: `as shipped` (the CLI returns Polars' freed pages at once for input
files of >= 256 MB, cli/_app.py) and `stock jemalloc` (`_RJEM_MALLOC_CONF` set empty, which the CLI leaves alone).
Prints medians as Markdown with peak RSS as a share of the file size (target: <= 0.75x) and MB/s.
What it does not do: run in CI (minutes and a 1 GB file) or assert anything. Delete the file after: 1 GB of disk.

    python bench/bench_big_trace.py [--repeat 2] [--size-mb 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _side_by_side import timed

HERE = Path(__file__).parent
BIG = HERE / "out" / "big1g_trace.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--size-mb", type=float, default=1000.0)
    args = parser.parse_args()
    if not BIG.exists():
        subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), str(BIG), "--size-mb", str(args.size_mb)],
                       check=True)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # both runs with bytecode caches (see bench_trace.py)
    exe = str(Path(sys.executable).with_name("servescope"))
    cmd = [exe, "trace", "--json", str(BIG)]
    runs: dict[str, list[tuple[float, float]]] = {"as shipped": [], "stock jemalloc": []}
    timed(cmd)  # warm-up: page cache and bytecode
    for _ in range(args.repeat):
        os.environ.pop("_RJEM_MALLOC_CONF", None)
        runs["as shipped"].append(timed(cmd))
        os.environ["_RJEM_MALLOC_CONF"] = ""
        runs["stock jemalloc"].append(timed(cmd))
    os.environ.pop("_RJEM_MALLOC_CONF", None)
    size_mb = BIG.stat().st_size / 1e6
    print(f"trace: {BIG.name}, {size_mb:,.1f} MB; medians of {args.repeat} alternated runs")
    print("| run | wall s | MB/s | peak RSS MB | × file size |")
    print("|---|---|---|---|---|")
    for name, rs in runs.items():
        wall, rss = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
        print(f"| {name} | {wall:.2f} | {size_mb / wall:.0f} | {rss:.0f} | {rss / size_mb:.2f} |")
    for name, rs in runs.items():
        print(f"raw {name}: {[(round(w, 2), round(r)) for w, r in rs]}")


if __name__ == "__main__":
    main()
