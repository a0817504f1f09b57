"""Side-by-side benchmark: `servescope trace --json` against HTA on the same ~70 MB trace, in one run.

What it does: builds bench/out/big_trace.json (make_big_trace.py: the B200 vLLM trace's events repeated with fresh
ids and time offsets) unless present, then alternates the two tools R times, each in a fresh process under
GNU time (`/usr/bin/time -f "%e %M"`: wall seconds and peak RSS in KiB of that process tree's largest process),
and prints medians and ratios as Markdown for bench/RESULTS.md.
HTA = `holistictraceanalysis` from PyPI, in its own venv (bench/out/hta-venv, created on first use):
`TraceAnalysis(trace_dir=…)` load plus `get_gpu_kernel_breakdown()`, as the issue specifies.
What it does not do: run in CI (it needs the network once, for HTA) or assert anything.

`--src DIR` runs servescope from another tree's `src/` (PYTHONPATH; e.g. one bench_start.py extracted from a commit,
when the shared working tree is mid-edit).

    python bench/bench_trace.py [--repeat 3] [--size-mb 70] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
OUT = HERE / "out"
BIG = OUT / "big_trace.json"
HTA_VENV = OUT / "hta-venv"
HTA_SCRIPT = (
    "import sys\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "ta = TraceAnalysis(trace_dir=sys.argv[1])\n"
    "ta.get_gpu_kernel_breakdown()\n"
)


# Both tools run as installed packages run: with bytecode caches. HTA's were compiled by pip at install; servescope
# (an editable install) writes its own on first import, unless PYTHONDONTWRITEBYTECODE is set (this sandbox sets it,
# which recompiled ~40 modules on every run: ~0.4 s of a 1.5 s run). So it is unset here and one untimed warm-up
# run writes the caches before the alternation.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _timed(cmd: list[str], env: dict[str, str] = ENV) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one command, from GNU time."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], capture_output=True, text=True, check=True, env=env)
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()
    return float(wall_s), float(rss_kib) * 1024 / 1e6


def _ensure_hta() -> Path:
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "holistictraceanalysis"], check=True)
    return python


def _ensure_trace(size_mb: float) -> None:
    if not BIG.exists():
        subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), str(BIG), "--size-mb", str(size_mb)],
                       check=True)
    hta_dir = OUT / "hta_dir"
    hta_dir.mkdir(parents=True, exist_ok=True)
    target = hta_dir / "rank-0.json"
    if not target.exists():
        shutil.copyfile(BIG, target)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=float, default=70.0)
    parser.add_argument("--src", type=Path, default=None, help="run servescope from this src/ (PYTHONPATH)")
    args = parser.parse_args()
    ours_env = {**ENV, "PYTHONPATH": str(args.src.resolve())} if args.src is not None else ENV
    _ensure_trace(args.size_mb)
    hta_python = _ensure_hta()
    ours_cmd = [sys.executable, "-m", "servescope", "trace", "--json", str(BIG)]
    hta_cmd = [str(hta_python), "-c", HTA_SCRIPT, str(OUT / "hta_dir")]
    ours, hta = [], []
    _timed(ours_cmd, ours_env), _timed(hta_cmd)  # warm-up: bytecode caches and the page cache, for both
    for _ in range(args.repeat):  # alternate, so drift on a noisy machine hits both alike
        ours.append(_timed(ours_cmd, ours_env))
        hta.append(_timed(hta_cmd))
    o_s, o_mb = statistics.median(x[0] for x in ours), statistics.median(x[1] for x in ours)
    h_s, h_mb = statistics.median(x[0] for x in hta), statistics.median(x[1] for x in hta)
    size_mb = BIG.stat().st_size / 1e6
    print(f"| tool | wall s (median of {args.repeat}) | peak RSS MB |")
    print("|---|---|---|")
    print(f"| servescope trace --json | {o_s:.2f} | {o_mb:.0f} |")
    print(f"| HTA load + get_gpu_kernel_breakdown | {h_s:.2f} | {h_mb:.0f} |")
    print(f"\ntrace: {size_mb:.1f} MB plain JSON; speed-up {h_s / o_s:.1f}×; RSS ratio {o_mb / h_mb:.2f} "
          f"(servescope / HTA)")
    print(f"raw servescope runs: {ours}\nraw HTA runs: {hta}")


if __name__ == "__main__":
    main()
