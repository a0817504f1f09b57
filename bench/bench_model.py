"""Speed of the performance model on one core: predictions per second.

Usage: .venv/bin/python bench/bench_model.py [--baseline REV]
`--baseline REV` runs the same measurements on the code of git revision REV first (exported to a temporary
folder, run in a child process), then on the working tree: side by side in one run, each with its peak RSS.
Measures (best of 5 repeats): scalar decode_step calls; predict() over a 64-point concurrency sweep (ServingPoint
objects); predict_arrays over the same sweep (numpy only); and building a Scenario from names. Prints a table
to paste into bench/RESULTS.md "## Model".
"""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("BENCH_SRC") or str(ROOT / "src"))

from servescope.perfmodel import Scenario, decode_step, predict, predict_arrays  # noqa: E402


def _rate(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    sweep = list(range(1, 257, 4))  # 64 concurrency points
    cases = {
        "llama-3.1-8b h100 tp1": Scenario.build("llama-3.1-8b", "h100_sxm"),
        "deepseek-v3 b200 tp8 fp8": Scenario.build("deepseek-v3", "b200_sxm", tp=8, quant="fp8-block"),
        "kimi-k2.5 rtx_pro tp8 int4": Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8,
                                                     moe_quant="int4-w4a16"),
    }
    print(f"python {platform.python_version()}, {platform.machine()}, pid {os.getpid()}")
    print("| scenario | decode_step calls/s | predict() points/s (64-pt sweep) | predict_arrays points/s |")
    print("|---|---|---|---|")
    for name, sc in cases.items():
        r_step = _rate(lambda sc=sc: decode_step(sc, 32, 2048), 300)
        r_pred = _rate(lambda sc=sc: predict(sc, sweep), 30) * len(sweep)
        r_arr = _rate(lambda sc=sc: predict_arrays(sc, sweep), 100) * len(sweep)
        print(f"| {name} | {r_step:,.0f} | {r_pred:,.0f} | {r_arr:,.0f} |")
    r_build = _rate(lambda: Scenario.build("deepseek-v3", "b200_sxm", tp=8, quant="fp8-block"), 50)
    print(f"\nScenario.build (names -> checked scenario, cached specs): {r_build:,.0f} /s")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def baseline(rev: str) -> None:
    """Export `rev` to a temporary folder and run this script on it in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        print(f"## baseline: git revision {rev}")
        sys.stdout.flush()
        subprocess.run([sys.executable, __file__], env={**os.environ, "BENCH_SRC": f"{tmp}/src"}, check=True)
    print("\n## working tree")
    sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--baseline":
        baseline(sys.argv[2])
    main()
