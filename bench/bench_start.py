"""Start-up of the CLI, a baseline tree against this one side by side (issue 30 item 1: start fast).

What it does: extracts the `src/` of two commits (`git archive REF`: the baseline and, by default, HEAD — commits,
not the working tree, which others may be editing) into bench/out/start-src-*, then for each
command — `--help`, `trace` (text) and `trace --json` on the bundled example — runs both trees alternately R times
in fresh processes under GNU time (median wall s, median peak RSS MB), and once each under `python -X importtime`:
modules imported, the sum of their own import times, and which heavy libraries were loaded. Prints Markdown for
bench/RESULTS.md. Bytecode caches are warm (one run of each command per tree first).
What it does not do: assert anything (tests/cli/test_cli_imports.py checks which modules load), or time stages
inside the analysis (`servescope trace --timings` does).

    python bench/bench_start.py [--repeat 7] [--baseline REF]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "out"
TREES = OUT / "start-src"
HEAVY = ("numpy", "polars", "rich", "msgspec", "plotly", "jinja2", "servescope.perfmodel", "servescope.specs.engines")
COMMANDS = {"--help": ["--help"], "trace": ["trace"], "trace --json": ["trace", "--json"]}


def extracted_src(ref: str, name: str) -> Path:
    """`src/` of commit `ref`, extracted under bench/out/start-src/NAME."""
    where = TREES / name
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(where, filter="data")
    return where / "src"


def env(src: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(src)}


def timed(args: list[str], src: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB) of `python -m servescope ARGS` from `src`, by GNU time."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "servescope", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(src), check=True)
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()[-2:]
    return float(wall_s), float(rss_kib) * 1024 / 1e6


def import_profile(args: list[str], src: Path) -> tuple[int, float, list[str]]:
    """(modules imported, sum of their own import times in ms, heavy ones among them) under -X importtime."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "servescope", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env(src), check=True)
    rows = [line.split("|") for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line]
    rows = [r for r in rows if r[0].split(":")[1].strip().isdigit()]
    names = {r[2].strip() for r in rows}
    heavy = [h for h in HEAVY if h in names]
    return len(rows), sum(int(r[0].split(":")[1]) for r in rows) / 1e3, heavy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--baseline", default="04808c9~1", help="git ref whose src/ is the baseline (default: the commit "
                                                            "before the lazy command table)")
    ap.add_argument("--after", default="HEAD", help="git ref compared with it")
    a = ap.parse_args()
    trees = {a.baseline: extracted_src(a.baseline, "before"), a.after: extracted_src(a.after, "after")}
    for src in trees.values():  # warm bytecode caches
        for args in COMMANDS.values():
            timed(args, src)
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {(c, t): [] for c in COMMANDS for t in trees}
    for _ in range(a.repeat):
        for cmd, args in COMMANDS.items():
            for tree, src in trees.items():
                runs[cmd, tree].append(timed(args, src))
    print(f"| command | tree | wall s (median of {a.repeat}) | min | peak RSS MB | modules imported | "
          "own import time ms (sum) | heavy modules loaded |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for (cmd, tree), rs in runs.items():
        n, ms, heavy = import_profile(COMMANDS[cmd], trees[tree])
        print(f"| {cmd} | {tree} | {statistics.median(r[0] for r in rs):.2f} | {min(r[0] for r in rs):.2f} | "
              f"{statistics.median(r[1] for r in rs):.0f} | {n} | {ms:.0f} | {', '.join(heavy) or '–'} |")


if __name__ == "__main__":
    main()
