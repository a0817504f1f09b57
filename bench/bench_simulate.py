"""Speed of `servescope simulate` next to the closed form, on one core.

Usage: .venv/bin/python bench/bench_simulate.py
The issue's target case: a closed loop of 1,000 requests at concurrency 256, ISL/OSL 1024/1024, vLLM / SGLang /
TRT-LLM defaults, on three scenarios (a dense 8B with KV to spare, a dense 70B on TP=4, and Kimi-K2.5 INT4 on
8× RTX PRO 6000 whose KV cache holds ~116 such sequences, so it preempts). Side by side in the same process:
the closed form (`predict` at the same concurrency, the fast path for sweeps). Times are the best of 3 repeats,
wall clock and process CPU time (the CPU time is what one core spends; the wall clock on a shared machine is
inflated by other processes); peak RSS of the process after all runs. Prints a table to paste into
bench/RESULTS.md "## Simulate".
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servescope.perfmodel import Scenario, predict  # noqa: E402
from servescope.simulate import simulate  # noqa: E402

CASES = {
    "llama-3.1-8b h100 tp1": dict(model="llama-3.1-8b", gpu="h100_sxm"),
    "llama-3.1-70b h100 tp4": dict(model="llama-3.1-70b", gpu="h100_sxm", tp=4),
    "kimi-k2.5 rtx_pro tp8 int4": dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16"),
}


def _best(fn: Callable[[], object], repeats: int = 3) -> tuple[float, float, object]:
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


def main() -> None:
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| scenario | backend | simulate wall s | simulate CPU s | requests | closed form wall ms "
          "| sim tok/s | closed-form tok/s | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, kw in CASES.items():
        for backend in ("vllm", "sglang", "trtllm"):
            sc = Scenario.build(**kw, isl=1024, osl=1024, backend=backend)  # type: ignore[arg-type]
            w, c, res = _best(lambda sc=sc: simulate(sc, "closed", 256, 1000))
            wc, _, pts = _best(lambda sc=sc: predict(sc, [256]))
            r = res  # type: ignore[assignment]
            print(f"| {name} | {backend} | {w:.3f} | {c:.3f} | 1000 | {wc * 1e3:.2f} | {r.output_tok_s:,.0f} "  # type: ignore[attr-defined]
                  f"| {pts[0].output_tok_s:,.0f} | {r.queueing.preemptions} |")  # type: ignore[index,attr-defined]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of the process: {rss:.0f} MB")


if __name__ == "__main__":
    main()
