"""Rank folders at population scale (issue 30 part 3): 1,000 rank files on 2 cores, 10 of them damaged, then again
from the per-rank summary cache.

What it does: builds bench/out/ranks_scale/N<n>/ — N plain-JSON rank files made from HTA's two real sampled ranks
(tests/data/traces/hta/trace_filter, MIT), rank r from sampled rank r % 2 with `distributedInfo.rank = r`,
`world_size = N` and every GPU/CPU duration scaled by its own factor in [1 − jitter, 1 + jitter] (seeded by r, so
ranks differ as real ranks do and the slowest rank varies); `--copies k` repeats the events k times (fresh ids,
shifted times, as make_big_trace.py does) for bigger files. The last `--damaged` files are overwritten with damage
of six kinds (truncated mid-event, random bytes, empty, a JSON array of numbers, nested too deeply, cut gzip).
A folder of two such files (one per core) is built beside it. Then, each in a fresh process:
  A. `servescope trace --json TWO --workers 2`                      one file per core
  B. `servescope trace --json ONE`                                   one file alone (the one-file working set)
  C. `servescope trace --json BIG --workers 2`                       the folder without a cache
  D. `servescope trace --json BIG --workers 2 --cache C` (C empty)   the first run (fills the cache)
  E. the same again                                                   the second run, from the cache
  F. E with the text report                                           what a terminal user runs
and prints, as Markdown for bench/RESULTS.md: wall s, peak RSS of the largest process (GNU time %M), of the largest
worker process and of the process tree (sampled from /proc every 20 ms), ranks analysed, damaged files named in the
warnings; one file's analysis in a warm process (the per-file cost without interpreter start and imports); then the
ratios of the targets: D ÷ (N/2 × A) and, stricter, D ÷ (N/2 × the warm per-file time) (≤ 2: the folder costs at
most twice one file per core, per file), and E ÷ D (≤ 0.10).
What it does not do: run in CI or assert anything (the targets are read off its output).

`--json-scale 100,300,1000` measures instead how `trace --json` grows with the rank count: for each count a folder
built as above, then `trace --json DIR --workers 2` without a cache (C), with an empty cache (D) and from it (E),
the text report from it (F), and one file alone (B), each in a fresh process; peak RSS as above and the document's size and sha256. `--trees
REF,REF` runs the same commands on each git ref's src/ (git archive into a temporary folder, on PYTHONPATH; the
analysis of the ref, this venv's packages) instead of the working tree: before and after side by side.

    python bench/bench_rank_scale.py [--ranks 1000] [--damaged 10] [--copies 1] [--jitter 0.05]
    python bench/bench_rank_scale.py --json-scale 100,300,1000 [--trees a8c8988,HEAD]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from bench_ranks import _children, _tree_rss_bytes  # noqa: E402  (bench scripts are run as files, not a package)
from make_big_trace import _max_ids, _shifted  # noqa: E402

SAMPLED = HERE.parent / "tests" / "data" / "traces" / "hta" / "trace_filter"
SOURCES = (SAMPLED / "sampled_rank-0.json.gz", SAMPLED / "sampled_rank-1.json.gz")


def _repeated(doc: dict[str, Any], copies: int) -> list[dict[str, Any]]:
    events = doc["traceEvents"]
    if copies == 1:
        return events
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    dt_us = max(e["ts"] + float(e.get("dur", 0)) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    step = {k: v + 1 for k, v in _max_ids(events).items()}
    return [_shifted(e, k, dt_us, step) for k in range(copies) for e in events]


def _jittered(events: list[dict[str, Any]], rank: int, jitter: float) -> list[dict[str, Any]]:
    rng = random.Random(rank)
    out = []
    for ev in events:
        if isinstance(ev.get("dur"), (int, float)):
            ev = {**ev, "dur": round(ev["dur"] * (1 + jitter * (2 * rng.random() - 1)), 3)}
        out.append(ev)
    return out


def _write_rank(folder: Path, rank: int, n: int, sources: list[dict[str, Any]], jitter: float) -> None:
    doc = dict(sources[rank % 2])
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": n}
    doc["traceEvents"] = _jittered(doc["traceEvents"], rank, jitter)
    (folder / f"rank{rank}.json").write_text(json.dumps(doc))


DAMAGE = ("truncated", "random bytes", "empty", "numbers", "nested", "cut gzip")


def _damage(path: Path, kind: str) -> Path:
    if kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif kind == "random bytes":
        path.write_bytes(random.Random(path.name).randbytes(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "numbers":
        path.write_text(json.dumps(list(range(1000))))
    elif kind == "nested":
        path.write_text("[" * 5000)
    else:  # a gzip cut in half, renamed .json.gz
        gz = path.with_suffix(".json.gz")
        gz.write_bytes(gzip.compress(path.read_bytes())[:2000])
        path.unlink()
        return gz
    return path


def build(ranks: int, damaged: int, copies: int, jitter: float) -> tuple[Path, Path, Path, list[str]]:
    """(the big folder, the two-file folder, one file, the damaged file names); built once per parameters."""
    root = HERE / "out" / "ranks_scale" / f"N{ranks}_c{copies}_j{jitter}_d{damaged}"
    big, two = root / "big", root / "two"
    names_file = root / "damaged.json"
    if not names_file.exists():
        shutil.rmtree(root, ignore_errors=True)
        big.mkdir(parents=True)
        two.mkdir()
        docs = [json.loads(gzip.decompress(s.read_bytes())) for s in SOURCES]
        sources = [{**d, "traceEvents": _repeated(d, copies)} for d in docs]
        for r in range(ranks):
            _write_rank(big, r, ranks, sources, jitter)
        for r in range(2):
            shutil.copyfile(big / f"rank{r}.json", two / f"rank{r}.json")
        hit = [_damage(big / f"rank{r}.json", DAMAGE[i % len(DAMAGE)]).name
               for i, r in enumerate(range(ranks - damaged, ranks))]
        names_file.write_text(json.dumps(hit))
    return big, two, two / "rank0.json", json.loads(names_file.read_text())


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _workers(pid: int) -> list[int]:
    """The worker processes of the servescope process under /usr/bin/time `pid` (its grandchildren)."""
    return [w for child in _children(pid) for w in _children(child)]


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall s, peak RSS MB of the largest process (GNU time), of the process tree and of the largest worker process
    (sampled from /proc every 20 ms), the JSON document, its size and sha256, stderr."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M", *cmd], stdout=out, stderr=subprocess.PIPE,
                                text=True, env=env)
        peak, worker = [0], [0]

        def sample() -> None:
            while proc.poll() is None:
                peak[0] = max(peak[0], _tree_rss_bytes(proc.pid))
                worker[0] = max([worker[0], *(_rss_bytes(w) for w in _workers(proc.pid))])
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, err = proc.communicate()
        sampler.join()
        out.seek(0)
        stdout = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {err[-800:]}")
    wall_s, rss_kib = err.strip().splitlines()[-1].split()
    return {"wall_s": float(wall_s), "rss_mb": float(rss_kib) * 1024 / 1e6, "tree_mb": peak[0] / 1e6,
            "worker_mb": worker[0] / 1e6, "doc": json.loads(stdout) if stdout.startswith("{") else {}, "stderr": err,
            "doc_mb": len(stdout.encode()) / 1e6, "sha256": hashlib.sha256(stdout.encode()).hexdigest()[:12]}


WARM = """
import statistics, sys, time
from servescope.analysis.ranks import analyze_rank_file
for _ in range(2):
    analyze_rank_file(sys.argv[1])
runs = []
for _ in range(7):
    t = time.perf_counter()
    analyze_rank_file(sys.argv[1])
    runs.append(time.perf_counter() - t)
print(statistics.median(runs))
"""


def _warm_file_s(path: Path) -> float:
    """Median wall s of one file's analysis in a warm process (library, imports done): the per-file cost."""
    return float(subprocess.run([sys.executable, "-c", WARM, str(path)], capture_output=True, text=True,
                                check=True).stdout)


def _named(run: dict[str, Any], names: list[str]) -> int:
    """Damaged files named in the warnings (a folded line names 8 and counts the rest as '+k more')."""
    text = "\n".join(run["doc"].get("warnings", []))
    more = sum(int(w.split("+", 1)[1].split()[0]) for w in run["doc"].get("warnings", []) if ", +" in w
               and "skipped" in w)
    return sum(n in text for n in names) + more


def _tree_env(ref: str, into: Path) -> tuple[str, dict[str, str] | None]:
    """(label, environment) that runs `python -m servescope` from git ref `ref`'s src/ ("." : the working tree)."""
    if ref == ".":
        return "working tree", None
    sha = subprocess.run(["git", "rev-parse", "--short", ref], capture_output=True, text=True, check=True,
                         cwd=HERE).stdout.strip()
    dest = into / sha
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", sha, "src"], capture_output=True, check=True, cwd=HERE.parent).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return sha, {**os.environ, "PYTHONPATH": str(dest / "src")}


def json_scale(counts: list[int], trees: list[str], damaged: int, copies: int, jitter: float) -> None:
    """`trace --json` at each rank count, on each tree: peak RSS against the rank count (see the module doc)."""
    folders = {n: build(n, damaged, copies, jitter) for n in counts}
    size_mb = (folders[counts[0]][1] / "rank0.json").stat().st_size / 1e6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ref in trees:
            label, env = _tree_env(ref, Path(tmp) / "trees")
            cli = [sys.executable, "-m", "servescope", "trace", "--json"]
            one = _timed([*cli, str(folders[counts[0]][2])], env)
            rows.append((label, 1, "B one file alone", one))
            for n in counts:
                big, names = folders[n][0], folders[n][3]
                cache = Path(tmp) / f"cache-{label}-{n}"
                cached = [*cli, str(big), "--workers", "2", "--cache", str(cache)]
                for run, cmd in (("C no cache", [*cli, str(big), "--workers", "2"]), ("D empty cache", cached),
                                 ("E from the cache", cached),
                                 ("F text report, from the cache", [c for c in cached if c != "--json"])):
                    r = _timed(cmd, env)
                    r["named"] = f"{_named(r, names)}/{len(names)}"
                    rows.append((label, n, run, r))
                    print(f"{label} {n} {run}: {r['wall_s']:.2f} s, {r['rss_mb']:.0f} MB", file=sys.stderr)
    print(f"\n`trace --json DIR --workers 2`: rank files of {size_mb:.2f} MB, {damaged} of each folder damaged\n")
    print("| tree | rank files | run | wall s | peak RSS MB, largest process | largest worker | process tree "
          "| ranks in the document | damaged named | document MB | sha256 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, n, run, r in rows:
        print(f"| {label} | {n} | {run} | {r['wall_s']:.2f} | {r['rss_mb']:.0f} | {r['worker_mb']:.0f} | "
              f"{r['tree_mb']:.0f} | {len(r['doc'].get('ranks', []))} | {r.get('named', '–')} | {r['doc_mb']:.1f} | "
              f"{r['sha256']} |")
    lo, hi = min(counts), max(counts)
    for label in dict.fromkeys(t for t, *_ in rows):
        for run in ("C no cache", "D empty cache", "E from the cache", "F text report, from the cache"):
            rss = {n: r["rss_mb"] for t, n, name, r in rows if t == label and name == run}
            print(f"{label}, {run}: peak RSS {rss[lo]:.0f} → {rss[hi]:.0f} MB from {lo} to {hi} files: "
                  f"{1e3 * (rss[hi] - rss[lo]) / (hi - lo):.0f} KB per rank file")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--damaged", type=int, default=10)
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--jitter", type=float, default=0.05)
    ap.add_argument("--json-scale", default=None, help="rank counts, e.g. 100,300,1000: trace --json vs count")
    ap.add_argument("--trees", default=".", help="git refs to run (--json-scale), e.g. a8c8988,HEAD; '.' = this tree")
    a = ap.parse_args()
    if a.json_scale:
        json_scale([int(n) for n in a.json_scale.split(",")], a.trees.split(","), a.damaged, a.copies, a.jitter)
        return
    t0 = time.perf_counter()
    big, two, one, damaged = build(a.ranks, a.damaged, a.copies, a.jitter)
    size_mb = (two / "rank0.json").stat().st_size / 1e6
    print(f"inputs: {a.ranks} files of {size_mb:.2f} MB ({a.damaged} damaged), built or found in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    cli = [sys.executable, "-m", "servescope", "trace", "--json"]
    warm_s = _warm_file_s(one)
    with tempfile.TemporaryDirectory() as cache:
        cached = [*cli, str(big), "--workers", "2", "--cache", cache]
        runs = {"A one file per core (2 files, --workers 2)": _timed([*cli, str(two), "--workers", "2"]),
                "B 1 file alone": _timed([*cli, str(one)]),
                "C folder, no cache (--workers 2)": _timed([*cli, str(big), "--workers", "2"]),
                "D first run (--workers 2 --cache DIR, empty)": _timed(cached),
                "E second run (from the cache)": _timed(cached),
                "F second run, text report (from the cache)": _timed([c for c in cached if c != "--json"])}
    print(f"\n{a.ranks} rank files of {size_mb:.2f} MB, {a.damaged} damaged; 2 workers\n")
    print("| run | wall s | peak RSS MB, largest process | peak RSS MB, largest worker | peak RSS MB, process tree "
          "| ranks analysed | damaged named |")
    print("|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        ranks, folder = len(r["doc"].get("ranks", [])), name[0] in "CDEF"
        named = f"{_named(r, damaged)}/{len(damaged)}" if folder and r["doc"] else "–"
        print(f"| {name} | {r['wall_s']:.2f} | {r['rss_mb']:.0f} | {r['worker_mb']:.0f} | {r['tree_mb']:.0f} | "
              f"{ranks or '–'} | {named} |")
    wall = {name[0]: r["wall_s"] for name, r in runs.items()}
    print(f"\none file's analysis in a warm process: {warm_s:.3f} s")
    print(f"first run ÷ ({a.ranks}/2 × A, one file per core as a command) = {wall['D'] / (a.ranks / 2 * wall['A']):.3f}"
          " (target ≤ 2)")
    print(f"first run ÷ ({a.ranks}/2 × one file in a warm process) = {wall['D'] / (a.ranks / 2 * warm_s):.2f} "
          "(target ≤ 2, the strict reading)")
    print(f"second run ÷ first run = {wall['E'] / wall['D']:.3f} (target ≤ 0.10); first run ÷ no cache = "
          f"{wall['D'] / wall['C']:.2f}")


if __name__ == "__main__":
    main()
