"""Start-up of the CLI, a baseline tree against this one side by side (issue 30 item 1: start fast).

What it does: extracts the `src/` of two or more commits (`git archive REF`: the baseline and, by default, HEAD —
commits, not the working tree, which others may be editing) into bench/out/start-src/tree*, then for each
command — `--help`, `trace` (text) and `trace --json` on the bundled example, and `simulate` of one request
(`--json`: the command's fixed cost; `--only` picks some) — runs the trees alternately R times
in fresh processes under GNU time (median wall s, median CPU s, median peak RSS MB), and once each under `python -X importtime`:
modules imported, the sum of their own import times, and which heavy libraries were loaded. Prints Markdown for
bench/RESULTS.md. Bytecode caches are warm (one run of each command per tree first).
In the same alternation it times the floors — `python -c pass` and `python -c "import polars, numpy"` (the
libraries the analysis runs on), and the command's other libraries with them — and `trace --timings`' stages per
tree (medians), so that what a change bought is read against what no change to servescope can remove.
What it does not do: assert anything (tests/cli/test_cli_imports.py checks which modules load).

    python bench/bench_start.py [--repeat 7] [--baseline REF] [--after REF|dir:SRC,...] [--only trace,simulate]
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
HEAVY = ("numpy", "polars", "rich", "msgspec", "plotly", "jinja2", "servescope.perfmodel", "servescope.specs.engines",
         "servescope.planner", "servescope.report.plan_doc")
SIMULATE_1 = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1", "--num-prompts", "1"]
COMMANDS = {"--help": ["--help"], "trace": ["trace"], "trace --json": ["trace", "--json"],
            "simulate, 1 request, --json": [*SIMULATE_1, "--json"]}
FLOORS = {  # code run by `python -c`, no servescope
    "python -c pass": "pass",
    "import polars": "import polars",
    "import polars, numpy": "import polars, numpy",
    "+ msgspec, click, rich (the command's libraries)": "import polars, numpy, msgspec, click, rich.console, rich.table",
}


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


def timed(args: list[str], src: Path) -> tuple[float, float, float]:
    """(wall s, peak RSS MB, CPU s: user + system, all threads) of `python -m servescope ARGS` from `src`, by GNU
    time. The CPU seconds are what a machine shared with other work inflates least (the wall is a lower bound
    on them only for a single-threaded command; Polars runs threads)."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M %U %S", sys.executable, "-m", "servescope", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env(src), check=True)
    wall_s, rss_kib, user_s, sys_s = done.stderr.strip().splitlines()[-1].split()[-4:]
    return float(wall_s), float(rss_kib) * 1024 / 1e6, float(user_s) + float(sys_s)


def timed_code(code: str) -> float:
    """Wall s of `python -c CODE` (no servescope on the path), by GNU time."""
    env_ = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    done = subprocess.run(["/usr/bin/time", "-f", "%e", sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env_, check=True)
    return float(done.stderr.strip().splitlines()[-1])


def stage_times(src: Path) -> dict[str, float]:
    """`servescope trace --timings`' stages (s) on the bundled example, from its stderr line."""
    done = subprocess.run([sys.executable, "-m", "servescope", "trace", "--timings"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env(src), check=True)
    line = next(x for x in done.stderr.splitlines() if "timings (wall s):" in x).split("timings (wall s):")[1]
    pairs = [p.strip().split(" ")[:2] for part in line.split(";") for p in part.split(",")]
    return {name: float(value) for name, value in pairs}


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
    ap.add_argument("--after", default="HEAD", help="git ref(s) compared with it, comma-separated (each change "
                                                    "and its parent, in one alternation: REF~1,REF,...); dir:PATH "
                                                    "runs the src/ folder PATH as it is (e.g. a baseline with one "
                                                    "helper's files overlaid)")
    ap.add_argument("--only", default="", help="comma-separated words: only the commands whose name starts with "
                                                   "one of them (e.g. trace, simulate); the stage timer runs with trace")
    a = ap.parse_args()
    refs = list(dict.fromkeys([a.baseline, *a.after.split(",")]))
    words = tuple(w.strip() for w in a.only.split(",") if w.strip())
    commands = {c: args for c, args in COMMANDS.items() if not words or c.startswith(words)}
    trees = {ref: Path(ref[4:]) if ref.startswith("dir:") else extracted_src(ref, f"tree{i}")
             for i, ref in enumerate(refs)}
    for src in trees.values():  # bytecode written (PYTHONDONTWRITEBYTECODE may be set here), then caches warm
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, capture_output=True)
        for args in commands.values():
            timed(args, src)
    with_stages = any(c.startswith("trace") for c in commands)
    runs: dict[tuple[str, str], list[tuple[float, float, float]]] = {(c, t): [] for c in commands for t in trees}
    floors: dict[str, list[float]] = {f: [] for f in FLOORS}
    load = os.getloadavg()[0]
    stages: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(a.repeat):
        for name, code in FLOORS.items():
            floors[name].append(timed_code(code))
        for cmd, args in commands.items():
            for tree, src in trees.items():
                runs[cmd, tree].append(timed(args, src))
        for tree, src in trees.items() if with_stages else ():
            stages[tree].append(stage_times(src))
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} (1 min)\n")
    print(f"| command | tree | wall s (median of {a.repeat}) | min | CPU s (median) | peak RSS MB | modules imported | "
          "own import time ms (sum) | heavy modules loaded |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (cmd, tree), rs in runs.items():
        n, ms, heavy = import_profile(commands[cmd], trees[tree])
        print(f"| {cmd} | {tree} | {statistics.median(r[0] for r in rs):.3f} | {min(r[0] for r in rs):.3f} | "
              f"{statistics.median(r[2] for r in rs):.3f} | {statistics.median(r[1] for r in rs):.0f} | {n} | "
              f"{ms:.0f} | {', '.join(heavy) or '–'} |")
    print(f"\n| floor (no servescope) | wall s (median of {a.repeat}) | min |\n|---|---:|---:|")
    for name, ws in floors.items():
        print(f"| {name} | {statistics.median(ws):.2f} | {min(ws):.2f} |")
    if not with_stages:
        return
    names = list(dict.fromkeys(n for runs_ in stages.values() for r in runs_ for n in r))
    print(f"\n`trace --timings`, median of {a.repeat} per stage (s):\n\n| tree | {' | '.join(names)} |\n"
          f"|---|{'---:|' * len(names)}")
    for tree, runs_ in stages.items():
        print(f"| {tree} | {' | '.join(f'{statistics.median(r.get(n, 0.0) for r in runs_):.3f}' for n in names)} |")


if __name__ == "__main__":
    main()
