"""Issue 18's reference-box figures, computed by the shipped model (no fitting here): prints markdown.

Usage: .venv/bin/python bench/reference_issue18.py
Kimi-K2.5 (INT4 W4A16 routed experts), 8× rtx_pro_6000_server, vLLM 0.16.0 defaults, TP=8, ISL/OSL 1024/512.
Measured on that box (shared/reference: R6K-K25, the issue): TPOT 12.1 ms at batch 1; a peak near 1,536 output
tok/s at concurrency 128 (decode-only); EAGLE-3 k=3 at per-position acceptance 0.645/0.393/0.240 +32 % at batch 1
and ≈ +1 % at 128 (decode-only); KV cache 449,600 tokens with FP8 KV at gpu_memory_utilization 0.93.
Each figure is printed for the shipped model and, where it differs, with routed experts at aiconfigurator's
measured per-op curve (--moe-curve). The box has no row in the fit's data (out of sample for every fitted number).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servescope.perfmodel import Scenario, decode_step, predict  # noqa: E402
from servescope.perfmodel.memory import kv_cache_tokens  # noqa: E402
from servescope.planner import plan  # noqa: E402
from servescope.planner.speculative import spec_from_options  # noqa: E402
from servescope.simulate import engine_for  # noqa: E402
from servescope.simulate.loop import kv_blocks  # noqa: E402

CONC = (1, 2, 4, 8, 16, 32, 64, 128)


def box(**kw: object) -> Scenario:
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16", engine_version="0.16.0",
                          **kw)  # type: ignore[arg-type]


def main() -> None:
    sc = box()
    curve = sc.with_(efficiency=sc.efficiency.scaled(moe_curve=1.0))
    print("| figure | measured | shipped model | with --moe-curve |")
    print("|---|---|---|---|")
    tp1 = [predict(s, [1])[0].tpot_s * 1e3 for s in (sc, curve)]
    print(f"| TPOT at batch 1 (ms) | 12.1 | {tp1[0]:.2f} ({tp1[0] / 12.1 - 1:+.1%}) | {tp1[1]:.2f} "
          f"({tp1[1] / 12.1 - 1:+.1%}) |")
    ar = decode_step(sc, 1, 1280).collectives["all_reduce"].calls_per_step
    print(f"| all-reduces per decode step | ~123 | {ar} | {ar} |")
    fp8 = box(kv_quant="fp8", gpu_memory_utilization=0.93)
    tokens = kv_cache_tokens(fp8)
    cfg = engine_for(fp8)
    sim_tokens = kv_blocks(fp8, cfg) * cfg.block_size_tokens
    print(f"| KV cache, FP8 at 0.93 (tokens) | 449,600 | {tokens:,} ({tokens / 449600 - 1:+.2%}); simulate "
          f"{sim_tokens:,} | same |")
    dec = [replace(s, decode_only=True) for s in (sc, curve)]
    peak = [128 / decode_step(s, 128, 1024).step_time_s for s in dec]
    print(f"| decode-only output tok/s at 128 | ~1,536 | {peak[0]:,.0f} | {peak[1]:,.0f} |")
    spec = spec_from_options("eagle3", 3, "0.645,0.393,0.240", None)
    gains = [[plan(s, concurrency=c, spec=spec).track("speculative_decoding").gain for c in CONC] for s in dec]
    for i, c in enumerate(CONC):
        want = {1: "1.32 (target 1.25–1.40)", 128: "≈1.01 (target 0.92–1.10)"}.get(c, "no dip below 1 (2–32)")
        print(f"| EAGLE-3 gain, decode-only, c={c} | {want} | {gains[0][i]:.2f} | {gains[1][i]:.2f} |")


if __name__ == "__main__":
    main()
