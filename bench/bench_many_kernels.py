"""Memory of millions of tiny kernels, main's code against this tree, side by side (issue 21 part 2).

What it does: builds bench/out/many_kernels.json (make_many_kernels.py, N kernels, default 5 M, ~0.7 GB) and
bench/out/big_trace.json (make_big_trace.py, the 68 MB benchmark trace) unless present, extracts the baseline's
`src/` (`git archive REF`, default main) into bench/out/baseline-src, then, each command in a fresh process under
GNU time (wall s, peak RSS):
  1. `trace --json` and `export -o X.json.gz` on the many-kernel trace, baseline then this tree (once each: tens of
     seconds a run), with peak RSS as a multiple of the file's size (target: <= 1.5x);
  2. `trace --json` on the 68 MB trace, the two trees alternated R times (speed must stay within noise);
  3. `trace --json` of both trees on every file under tests/data/traces and on both big traces: byte-identical
     documents (and the two exports' JSON texts);
  4. `validate --json` on a CSV of R rows (tests/data/validation/measured_serving_dev.csv repeated, ids made
     unique; default 200,000), peak RSS and identical documents;
  5. one kernel named by 150 MB (146 KB of gzip) and by 1 GiB (1 MB of gzip) of one letter: wall time (limit 60 s)
     and peak RSS, exit status.
Prints Markdown for bench/RESULTS.md. Both trees run with bytecode caches (one warm-up run each, as bench_trace.py).
What it does not do: run in CI (minutes, ~1 GB of disk under bench/out) or assert anything.

    python bench/bench_many_kernels.py [--kernels 5000000] [--repeat 5] [--baseline main]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "out"
BIG = OUT / "big_trace.json"
BASE_SRC = OUT / "baseline-src"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _env(src: Path) -> dict[str, str]:
    return {**ENV, "PYTHONPATH": str(src)}


def _timed(args: list[str], src: Path, timeout: float | None = None) -> tuple[float, float, int | None]:
    """(wall s, peak RSS MB, exit status; None when killed at `timeout` s) of `python -m servescope ARGS` run from
    `src`, from GNU time."""
    limit = ["timeout", "-s", "KILL", str(timeout)] if timeout is not None else []
    cmd = ["/usr/bin/time", "-f", "%e %M", *limit, sys.executable, "-m", "servescope", *args]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(src))
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()[-2:]
    killed = timeout is not None and done.returncode == 128 + 9  # timeout's status for a command it killed
    return float(wall_s), float(rss_kib) * 1024 / 1e6, None if killed else done.returncode


def _output(args: list[str], src: Path) -> bytes:
    done = subprocess.run([sys.executable, "-m", "servescope", *args], capture_output=True, env=_env(src))
    return done.stdout + b"\0" + done.stderr + f"\0{done.returncode}".encode()


def _baseline(ref: str) -> Path:
    shutil.rmtree(BASE_SRC, ignore_errors=True)
    BASE_SRC.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(BASE_SRC, filter="data")
    return BASE_SRC / "src"


def _ensure(path: Path, maker: str, *args: str) -> None:
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / maker), str(path), *args], check=True)


def _json_sha(path: Path) -> str:
    """sha256 of a .json.gz file's JSON text, read in pieces."""
    digest = hashlib.sha256()
    with gzip.open(path, "rb") as fh:
        while piece := fh.read(8 << 20):
            digest.update(piece)
    return digest.hexdigest()


def _memory(many: Path, trees: dict[str, Path]) -> None:
    size_mb = many.stat().st_size / 1e6
    print(f"\n{many.name}: {size_mb:,.1f} MB; one run each")
    print("| command | tree | wall s | peak RSS MB | × file | exit |")
    print("|---|---|---|---|---|---|")
    shas = {}
    for what in ("trace --json", "export -o .json.gz"):
        for name, src in trees.items():
            target = OUT / f"many_export_{name}.json.gz"
            args = ["trace", str(many), "--json"] if what.startswith("trace") else ["export", str(many), "-o",
                                                                                     str(target)]
            wall, rss, code = _timed(args, src)
            print(f"| {what} | {name} | {wall:.1f} | {rss:,.0f} | {rss / size_mb:.2f} | {code} |")
            if what.startswith("export") and code == 0:
                shas[name] = _json_sha(target)
                target.unlink()
    if len(shas) == 2:
        print(f"export JSON texts identical: {len(set(shas.values())) == 1}")


def _speed(trees: dict[str, Path], repeat: int) -> None:
    runs: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(repeat):
        for name, src in trees.items():
            runs[name].append(_timed(["trace", str(BIG), "--json"], src)[0])
    print(f"\n{BIG.name} ({BIG.stat().st_size / 1e6:.1f} MB): `trace --json`, {repeat} alternated runs")
    print("| tree | median wall s | runs |")
    print("|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {statistics.median(rs):.2f} | {', '.join(f'{r:.2f}' for r in rs)} |")


def _identity(trees: dict[str, Path], many: Path) -> None:
    files = sorted(p for p in (ROOT / "tests" / "data" / "traces").rglob("*")
                   if p.is_file() and p.suffix in (".json", ".gz", ".sqlite"))
    files += [BIG, many]
    differ = []
    for path in files:
        outs = {_output(["trace", str(path), "--json"], src) for src in trees.values()}
        if len(outs) > 1:
            differ.append(path.name)
    print(f"\n`trace --json` (stdout, stderr, exit status) of both trees: {len(files)} files, {len(differ)} differ"
          + (f": {', '.join(differ)}" if differ else ""))


def _validate_csv(rows: int) -> Path:
    path = OUT / f"validate_{rows}.csv"
    if not path.exists():
        head, *body = (ROOT / "tests" / "data" / "validation" / "measured_serving_dev.csv").read_text().splitlines()
        with path.open("w") as fh:
            fh.write(head + "\n")
            for n in range(rows):
                line = body[n % len(body)]
                cut = line.index(",")
                fh.write(f"{line[:cut]}_r{n}{line[cut:]}\n")
    return path


def _validate(trees: dict[str, Path], rows: int) -> None:
    csv = _validate_csv(rows)
    print(f"\n`validate --json` on {csv.name} ({rows:,} rows, {csv.stat().st_size / 1e6:.0f} MB)")
    print("| tree | wall s | peak RSS MB | exit |")
    print("|---|---|---|---|")
    for name, src in trees.items():
        wall, rss, code = _timed(["validate", str(csv), "--json"], src)
        print(f"| {name} | {wall:.1f} | {rss:,.0f} | {code} |")
    same = len({_output(["validate", str(csv), "--json"], src) for src in trees.values()}) == 1
    print(f"documents identical: {same}")


def _one_name(path: Path, name_bytes: int) -> Path:
    """A gzip trace of one kernel whose name is `name_bytes` of "a", written member by member (never held)."""
    if not path.exists():
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        with path.open("wb") as fh:
            fh.write(c.compress(b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"'))
            piece = b"a" * (1 << 24)
            for _ in range(name_bytes // len(piece)):
                fh.write(c.compress(piece))
            fh.write(c.compress(b"a" * (name_bytes % len(piece))))
            fh.write(c.compress(b'","ts":1,"dur":1,"pid":0,"tid":0,"args":{"correlation":1}}]}') + c.flush())
    return path


def _long_names(trees: dict[str, Path]) -> None:
    print("\nOne kernel with a long name, `trace --json` (limit 60 s)")
    print("| input | tree | wall s | peak RSS MB | exit |")
    print("|---|---|---|---|---|")
    for label, size in (("150 MB name", 150_000_000), ("1 GiB name", 1 << 30)):
        path = _one_name(OUT / f"name_{size}.json.gz", size)
        for name, src in trees.items():
            wall, rss, code = _timed(["trace", str(path), "--json"], src, timeout=60)
            peak = "—" if code is None else f"{rss:,.0f}"  # GNU time sees the killer, not the killed
            print(f"| {label} ({path.stat().st_size / 1e3:,.0f} KB gz) | {name} | {wall:.1f} | {peak} | "
                  f"{'killed at 60 s' if code is None else code} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", default="main", help="git ref whose src/ is the baseline")
    ap.add_argument("--validate-rows", type=int, default=200_000)
    a = ap.parse_args()
    many = OUT / f"many_kernels_{a.kernels}.json"
    _ensure(many, "make_many_kernels.py", "--kernels", str(a.kernels))
    _ensure(BIG, "make_big_trace.py")
    trees = {a.baseline: _baseline(a.baseline), "this tree": ROOT / "src"}
    for src in trees.values():  # warm-up: bytecode caches
        _timed(["trace", "--json"], src)
    _memory(many, trees)
    _speed(trees, a.repeat)
    _identity(trees, many)
    _validate(trees, a.validate_rows)
    _long_names(trees)


if __name__ == "__main__":
    main()
