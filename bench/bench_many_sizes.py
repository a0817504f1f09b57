"""Peak memory of `trace --json` and `export` against file size at several sizes of the tiny-kernel trace (issue 30
item 2: memory proportional to what is kept, held at every size).

What it does: writes plain-JSON traces of N tiny kernels (bench/make_many_kernels.py; default 1 M, 2 M and 4 M: 143,
286 and 572 MB) under bench/out/sizes unless present, then runs `trace --json` and `export -o X.json.gz` on each in a
fresh process under GNU time and prints wall s, peak RSS MB and peak RSS / file size. `--shapes` picks the input
shapes (default plain): `plain` (16 repeated short names), `gzip` (the same, gzipped), `distinct` (every kernel its own
name, `--distinct-names`) and `distinct-gzip`. For gzip the ratio is given to the uncompressed JSON (the target's: the
events are what is kept, whatever the compression) and to the compressed file. `--delete` removes each trace after its
runs (20 M kernels: ~2.9 GB of JSON). `--src DIR` runs another
tree's `src/` (PYTHONPATH), e.g. one extracted by bench_start.py. `--allocator stock|free` overrides the CLI's
choice of Polars' allocator setting (cli._app.BIG_INPUT_BYTES) to compare the two.
What it does not do: assert anything, or repeat runs (each is seconds to tens of seconds; the RSS varies little).

    python bench/bench_many_sizes.py [--kernels 1000000,2000000,4000000] [--shapes plain,gzip,distinct,distinct-gzip]
        [--delete] [--src DIR] [--allocator stock|free]
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "out" / "sizes"
FREE_AT_ONCE = "background_thread:false,dirty_decay_ms:0,muzzy_decay_ms:0"  # as cli._app.FREE_AT_ONCE
STOCK = "background_thread:false"  # any setting of the user's own stops the CLI from choosing
SHAPES = {"plain": ("", False), "gzip": (".gz", False), "distinct": ("", True), "distinct-gzip": (".gz", True)}


def uncompressed_mb(path: Path) -> float:
    """The JSON's size: the file's, or for gzip its inflated bytes counted in pieces (ISIZE wraps at 4 GiB)."""
    if path.suffix != ".gz":
        return path.stat().st_size / 1e6
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n / 1e6


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", sys.executable, "-m", "servescope", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=True)
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()[-2:]
    return float(wall_s), float(rss_kib) * 1024 / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default="1000000,2000000,4000000")
    ap.add_argument("--shapes", default="plain", help="comma list of " + ",".join(SHAPES))
    ap.add_argument("--delete", action="store_true", help="remove each trace after its runs")
    ap.add_argument("--src", type=Path, default=None)
    ap.add_argument("--allocator", choices=("stock", "free"), default=None)
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if a.src is not None:
        env["PYTHONPATH"] = str(a.src.resolve())
    if a.allocator is not None:
        env["_RJEM_MALLOC_CONF"] = FREE_AT_ONCE if a.allocator == "free" else STOCK
    OUT.mkdir(parents=True, exist_ok=True)
    shapes = a.shapes.split(",")
    if bad := [s for s in shapes if s not in SHAPES]:
        ap.error(f"unknown shape(s) {bad}; choose from {','.join(SHAPES)}")
    print("| shape | kernels | file MB | JSON MB | command | wall s | peak RSS MB | peak / JSON | peak / file |\n"
          "|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for shape in shapes:
        suffix, distinct = SHAPES[shape]
        for n in (int(k) for k in a.kernels.split(",")):
            trace = OUT / f"k{n}{'_distinct' if distinct else ''}.json{suffix}"
            if not trace.exists():
                subprocess.run([sys.executable, str(HERE / "make_many_kernels.py"), str(trace), "--kernels", str(n),
                                *(["--distinct-names"] if distinct else [])], check=True, stdout=subprocess.DEVNULL)
            file_mb, json_mb = trace.stat().st_size / 1e6, uncompressed_mb(trace)
            target = OUT / "export.json.gz"
            for what, args in (("trace --json", ["trace", str(trace), "--json"]),
                               ("export", ["export", str(trace), "-o", str(target)])):
                wall, rss = timed(args, env)
                print(f"| {shape} | {n:,} | {file_mb:,.0f} | {json_mb:,.0f} | {what} | {wall:.1f} | {rss:,.0f} | "
                      f"{rss / json_mb:.2f} | {rss / file_mb:.2f} |", flush=True)
            target.unlink(missing_ok=True)
            if a.delete:
                trace.unlink()


if __name__ == "__main__":
    main()
