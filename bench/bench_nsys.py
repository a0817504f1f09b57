"""Nsight Systems SQLite input at scale: `servescope trace --json` on a large nsys export, beside a plain-SQL floor.

What it does: builds bench/out/big_nsys.sqlite (unless present) from the real 2-GPU fixture
tests/data/traces/nsys-ai/mfu_2gpu_before.sqlite, its kernel, memcpy, memset, runtime and NVTX rows repeated
COPIES times with time offsets (one fixture span plus 1 ms per copy) and fresh correlationIds, then runs, in
fresh processes under GNU time (wall s, peak RSS):
  1. `servescope trace --json big_nsys.sqlite` (load + classify + steps + breakdown + findings),
  2. `load_trace(big_nsys.sqlite)` alone,
  3. the floor: stdlib sqlite3 reading start/end/deviceId of the three GPU tables and a sort-and-sweep union
     per device in plain Python — only GPU busy time, the least any tool must do (no names, no linkage).
No peer tool is installable here (Nsight Systems' own `nsys stats` is not on PyPI), so the floor stands in.
What it does not do: run in CI or assert anything. Prints Markdown for bench/RESULTS.md.

    python bench/bench_nsys.py [--copies 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "out"
BIG = OUT / "big_nsys.sqlite"
FIXTURE = HERE.parent / "tests" / "data" / "traces" / "nsys-ai" / "mfu_2gpu_before.sqlite"
TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
FLOOR = """
import sqlite3, sys
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
by_dev = {}
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
    for d, s, e in con.execute(f'SELECT deviceId, start, "end" FROM {t}'):
        by_dev.setdefault(d, []).append((s, e))
for d, iv in by_dev.items():
    iv.sort(); total = 0; cs, ce = iv[0]
    for s, e in iv:
        if s > ce: total += ce - cs; cs, ce = s, e
        else: ce = max(ce, e)
    print(d, (total + ce - cs) / 1e3)
"""
LOAD_ONLY = "import sys; from servescope.trace import load_trace; print(load_trace(sys.argv[1]).events.height)"


def _build(copies: int) -> None:
    """Copy the fixture and append COPIES-1 shifted copies of its activity rows (correlationIds shifted too)."""
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = BIG.with_suffix(".tmp")
    shutil.copyfile(FIXTURE, tmp)
    with sqlite3.connect(tmp) as con:
        lo, hi = con.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        (max_corr,) = con.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        shift_ns, corr_step = hi - lo + 1_000_000, max_corr + 1
        for table in TABLES:
            cols = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            for k in range(1, copies):
                exprs = [_shifted(c, k * shift_ns, k * corr_step) for c in cols]
                quoted = ", ".join(f'"{c}"' for c in cols)
                con.execute(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(exprs)} FROM {table} WHERE rowid <= "
                            f"(SELECT count(*) FROM {table}) / {k}")  # the original rows only
    tmp.rename(BIG)


def _shifted(col: str, dt_ns: int, dcorr: int) -> str:
    if col in ("start", "end"):
        return f'"{col}" + {dt_ns}'
    if col == "correlationId":
        return f'"{col}" + {dcorr}'
    return f'"{col}"'


def _timed(cmd: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s = user + sys, peak RSS MB) of one command, from GNU time. CPU seconds are the steadier
    number on a shared machine (wall time there includes waiting for a core)."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", *cmd], capture_output=True, text=True, check=True)
    wall_s, user_s, sys_s, rss_kib = done.stderr.strip().splitlines()[-1].split()
    return float(wall_s), float(user_s) + float(sys_s), float(rss_kib) * 1024 / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not BIG.exists():
        _build(args.copies)
    with sqlite3.connect(f"file:{BIG}?mode=ro&immutable=1", uri=True) as con:
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    runs = {
        "servescope trace --json": [sys.executable, "-m", "servescope", "trace", "--json", str(BIG)],
        "load_trace only": [sys.executable, "-c", LOAD_ONLY, str(BIG)],
        "floor: sqlite3 + Python union (busy only)": [sys.executable, "-c", FLOOR, str(BIG)],
    }
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeat):  # interleaved, so drift on a shared machine hits all alike
        for name, cmd in runs.items():
            results[name].append(_timed(cmd))
    print(f"input: {BIG.name}, {BIG.stat().st_size / 1e6:.0f} MB; rows: "
          + ", ".join(f"{t.removeprefix('CUPTI_ACTIVITY_KIND_')} {n:,}" for t, n in counts.items()))
    print(f"\n| run | wall s | CPU s (user+sys) | peak RSS MB |  (medians of {args.repeat})\n|---|---|---|---|")
    for name, xs in results.items():
        wall, cpu, rss = (statistics.median(x[i] for x in xs) for i in range(3))
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
