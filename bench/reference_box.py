"""The reference box under the scheduler simulation: output tok/s at concurrency 128 and 256 with ranges (issue 8).

Usage: .venv/bin/python bench/reference_box.py
Kimi-K2.5 (INT4 routed experts, the checkpoint's native scheme) on 8× rtx_pro_6000_server, TP=8, ISL/OSL 1024/1024,
closed loop of 1,000 requests (`vllm bench serve --max-concurrency c`), fixed lengths. The range spans the three
engines' default schedulers and KV pools (specs/data/engines/) and three KV capacities: the memory model's with a BF16
cache (the checkpoint's default), the memory model's with an FP8 cache (`--kv-cache-dtype fp8`), and the 449,600
tokens the rtx6kpro write-up reports for this box without DCP (reference/hardware-and-models.md, R6K-K25).
Prints one line per run and the decode-only ceiling (closed form at the same batch, pure decode).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servescope.perfmodel import Scenario, decode_step  # noqa: E402
from servescope.simulate import engine_for, simulate  # noqa: E402
from servescope.simulate.loop import kv_blocks  # noqa: E402

REPORTED_KV_TOKENS = 449_600  # R6K-K25 via reference/hardware-and-models.md §3d


def main() -> None:
    base = dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, quant="native", isl=1024, osl=1024)
    for c in (128, 256):
        print(f"concurrency {c}")
        for kv_quant in ("bf16", "fp8"):
            for backend in ("vllm", "sglang", "trtllm"):
                sc = Scenario.build(**base, kv_quant=kv_quant, backend=backend)
                eng = engine_for(sc)
                for label, kv in ((f"model {kv_quant}", None), ("reported", REPORTED_KV_TOKENS)):
                    if label == "reported" and kv_quant == "bf16":
                        continue
                    r = simulate(sc, "closed", c, 1000, engine=eng, kv_cache_tokens=kv)
                    cap = kv_blocks(sc, eng) * eng.block_size_tokens if kv is None else kv
                    print(f"  {backend:7s} KV {label:10s} {cap:>9,} tok: {r.output_tok_s:7,.0f} tok/s, "
                          f"mean in flight {r.mean_in_flight:5.1f}, preemptions {r.queueing.preemptions:4d}, "
                          f"TTFT p50 {r.ttft.p50_s:6.1f} s p99 {r.ttft.p99_s:6.1f} s, TPOT {r.tpot.mean_s * 1e3:5.1f} ms")
        sc = Scenario.build(**base)
        step_s = decode_step(sc, c, sc.isl + sc.osl // 2).step_time_s  # the mean context of a request's decode
        print(f"  decode-only ceiling: {c / step_s:,.0f} tok/s ({step_s * 1e3:.0f} ms step at batch {c}, "
              f"context {sc.isl + sc.osl // 2})")


if __name__ == "__main__":
    main()
