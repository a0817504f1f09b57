"""Side-by-side benchmark: a rank folder (8 × ~69 MB) analysed in parallel against one file holding the same events.

What it does: builds bench/out/big_trace.json (make_big_trace.py, ~69 MB: the B200 vLLM trace's events repeated with
fresh ids and time offsets) unless present, copies it to bench/out/ranks8/rank{0..7}.json (8 ranks), and builds
bench/out/big8_trace.json, one file of 8 × that size (same event mix). Then, in one run, it alternates
  A. `servescope trace --json bench/out/ranks8`               (default: one process per core, this one included;
                                                                the workers fork before Polars is imported)
  B. `servescope trace --json bench/out/ranks8 --workers 1`   (the ranks one after another, in-process)
  C. `servescope trace --json bench/out/big8_trace.json`      (one file with the same events)
each in a fresh process, R times, and prints medians as Markdown for bench/RESULTS.md: wall seconds, peak RSS of
the largest process (GNU time %M) and peak RSS summed over the process tree (sampled from /proc every 20 ms, so
worker processes count); then the fastest run of each (the least disturbed on a shared machine) and the CPU
accounting: on C cores A cannot take less wall than its CPU seconds / C.
What it does not do: run in CI or assert anything; the target (A ≤ 0.65 × C) is read off the table.

    python bench/bench_ranks.py [--repeat 3] [--ranks 8] [--size-mb 70] [--runs ABC]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "out"
BIG = OUT / "big_trace.json"


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _tree_rss_bytes(root: int) -> int:
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        todo += _children(pid)
    return total


def _timed(cmd: list[str]) -> tuple[float, float, float, float]:
    """(wall s, peak RSS MB of the largest process, peak RSS MB summed over the process tree, CPU s user+sys)."""
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M %U %S", *cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_bytes(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {err[-500:]}")
    wall_s, rss_kib, user_s, sys_s = err.strip().splitlines()[-1].split()
    return float(wall_s), float(rss_kib) * 1024 / 1e6, peak[0] / 1e6, float(user_s) + float(sys_s)


def _ensure_inputs(ranks: int, size_mb: float) -> tuple[Path, Path]:
    maker = [sys.executable, str(HERE / "make_big_trace.py")]
    if not BIG.exists():
        subprocess.run([*maker, str(BIG), "--size-mb", str(size_mb)], check=True)
    folder = OUT / f"ranks{ranks}"
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        target = folder / f"rank{r}.json"
        if not target.exists() or target.stat().st_size != BIG.stat().st_size:
            shutil.copyfile(BIG, target)
    one = OUT / f"big{ranks}_trace.json"
    if not one.exists():
        subprocess.run([*maker, str(one), "--size-mb", str(ranks * BIG.stat().st_size / 1e6)], check=True)
    return folder, one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--size-mb", type=float, default=70.0)
    parser.add_argument("--runs", default="ABC", help="which of A, B, C to run (A and C at least)")
    args = parser.parse_args()
    folder, one = _ensure_inputs(args.ranks, args.size_mb)
    base = [sys.executable, "-m", "servescope", "trace", "--json"]
    runs = {
        f"A. folder, {args.ranks} ranks, parallel (default)": [*base, str(folder)],
        f"B. folder, {args.ranks} ranks, --workers 1": [*base, str(folder), "--workers", "1"],
        "C. one file, same events": [*base, str(one)],
    }
    runs = {k: v for k, v in runs.items() if k[0] in args.runs.upper() or k[0] in "AC"}
    results: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in runs}
    load_before = os.getloadavg()
    for _ in range(args.repeat):  # alternate, so drift on a shared machine hits all alike
        for name, cmd in runs.items():
            results[name].append(_timed(cmd))
    med = {k: tuple(statistics.median(x[i] for x in v) for i in range(4)) for k, v in results.items()}
    one_s = med["C. one file, same events"][0]
    folder_mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    print(f"{platform.node()}: {os.cpu_count()} cores; folder {folder_mb:.0f} MB, one file "
          f"{one.stat().st_size / 1e6:.0f} MB; medians of {args.repeat}; load average (1 min) before "
          f"{load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print("| run | wall s | × one file | CPU s (user+sys, whole tree) | peak RSS MB (largest process) | "
          "peak RSS MB (process tree) |")
    print("|---|---|---|---|---|---|")
    for name, (wall_s, rss_mb, tree_mb, cpu_s) in med.items():
        print(f"| {name} | {wall_s:.2f} | {wall_s / one_s:.2f} | {cpu_s:.1f} | {rss_mb:.0f} | {tree_mb:.0f} |")
    print("all runs (wall s): " + "; ".join(f"{k[:2]} {[round(x[0], 2) for x in v]}" for k, v in results.items()))
    a_key = next(k for k in results if k.startswith("A."))
    best_a, best_c = min(x[0] for x in results[a_key]), min(x[0] for x in results["C. one file, same events"])
    cores = os.cpu_count() or 1
    a_cpu, c_cpu = med[a_key][3], med["C. one file, same events"][3]
    print(f"fastest: A {best_a:.2f} s, C {best_c:.2f} s, A/C {best_a / best_c:.2f}; CPU (median): A {a_cpu:.2f} s, "
          f"C {c_cpu:.2f} s; A's lower bound on {cores} cores = CPU/{cores} = {a_cpu / cores:.2f} s = "
          f"{a_cpu / cores / best_c:.2f} × C's fastest wall")


if __name__ == "__main__":
    main()
