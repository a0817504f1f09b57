"""Where `trace --json`'s peak memory is: RSS sampled every 3 ms while one trace is analysed in-process, reported
between the entry and exit of the breakdown's steps (issue 30 item 2: which step sets the peak at which size).

What it does: wraps the breakdown's helpers (take_split, classify_gpu, find_steps, attach_work_chunked and each attach_work
chunk, compact, breakdown_steps, summarize_by_kind, step_timelines) to mark their entry and exit, runs
`advise.analyze(PATH)` with Polars' allocator returning freed pages at once (as the CLI does for big inputs), and
prints per interval its wall end, its peak RSS and the RSS at its end (`--fine`: also the per-step statistics
breakdown_steps and summarize_by_kind call). `--src DIR` analyses with another tree's
`src/` (e.g. one bench_start.py extracted from a commit).
What it does not do: run the CLI (no JSON is written), or measure anything but this process's RSS.

    python bench/rss_by_stage.py PATH [--src DIR] [--fine]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import os, sys, threading, time
samples, marks, stop = [], [], []
def rss():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) / 1024 for x in f if x.startswith("VmRSS"))
def sample():
    while not stop:
        samples.append((time.perf_counter(), rss()))
        time.sleep(0.003)
threading.Thread(target=sample, daemon=True).start()
import servescope.analysis.breakdown as bd
import servescope.analysis.gpu_rows as gr
from servescope.advise import analyze
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        marks.append((time.perf_counter(), "> " + name))
        try:
            return f(*a, **k)
        finally:
            marks.append((time.perf_counter(), "< " + name))
    setattr(mod, name, g)
for n in ("classify_gpu", "find_steps", "attach_work_chunked", "compact", "breakdown_steps", "summarize_by_kind",
          "step_timelines"):
    wrap(bd, n)
wrap(gr, "attach_work")
wrap(bd, "take_split")
if sys.argv[2:] == ["fine"]:  # the per-step statistics inside breakdown_steps and summarize_by_kind
    for n in ("in_steps", "union_lengths", "step_collectives", "step_top_kernels", "class_totals", "step_work",
              "launch_stats", "graph_idle_by_step", "unshaped_kernels_by_step"):
        wrap(bd, n)
t0 = time.perf_counter()
analyze(sys.argv[1])
marks.append((time.perf_counter(), "end"))
stop.append(1)
print("| from | to | ends at s | peak RSS MB | RSS at end MB |\n|---|---|---:|---:|---:|")
prev, name0 = t0, "start (load included)"
for t, name in marks:
    seg = [r for ts, r in samples if prev <= ts <= t] or [float("nan")]
    print(f"| {name0} | {name} | {t - t0:.2f} | {max(seg):.0f} | {seg[-1]:.0f} |")
    prev, name0 = t, name
'''
FREE_AT_ONCE = "background_thread:false,dirty_decay_ms:0,muzzy_decay_ms:0"  # as cli._memory.FREE_AT_ONCE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--src", type=Path, default=None)
    ap.add_argument("--fine", action="store_true")
    a = ap.parse_args()
    env = {**os.environ, "_RJEM_MALLOC_CONF": os.environ.get("_RJEM_MALLOC_CONF", FREE_AT_ONCE)}
    if a.src is not None:
        env["PYTHONPATH"] = str(a.src.resolve())
    subprocess.run([sys.executable, "-c", CHILD, str(a.path), *(["fine"] if a.fine else [])], env=env, check=True)


if __name__ == "__main__":
    main()
