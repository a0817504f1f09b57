"""Speed of the performance model on one core: predictions per second.

Usage: .venv/bin/python bench/bench_model.py
Measures (best of 5 repeats): scalar decode_step calls; predict() over a 64-point concurrency sweep (ServingPoint
objects); predict_arrays over the same sweep (numpy only); and building a Scenario from names. Prints a table
to paste into bench/RESULTS.md "## Model".
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

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


if __name__ == "__main__":
    main()
