"""Measure per-kernel overheads of serving engines from the real traces in ../shared/traces and write them, with
their source, to src/servescope/specs/data/engine_overheads.toml (the perfmodel reads that file; it never
reads traces itself).

Usage: .venv/bin/python data-build/measure_engine_overheads.py [--dry-run]
Per step (servescope.analyze_trace):
  gap_us_per_kernel    = GPU idle inside the step span / kernels            (launch gaps between kernels)
  small_us_per_kernel  = (GPU busy − union time of gemm, moe, attention, communication) / kernels
                         (norms, rotary, casts, activations, copies: the kernels the roofline terms do not price)
  per_kernel_us        = gap + small: what `kernel_overhead_s` stands for in perfmodel/step.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import servescope  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "tracelens"
OUT = ROOT / "src/servescope/specs/data/engine_overheads.toml"
PRICED = ("gemm", "moe", "attention", "communication")
# (engine, mode, trace relative to TRACES, what it is)
CASES = (
    ("vllm", "graph", "inference/vllm_decode_full/graph_execution.json.gz",
     "vLLM decode, FULL CUDA-graph replay, batch 32 (TraceLens tests/traces, ROCm GPU with 304 CUs)"),
    ("vllm", "piecewise", "inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
     "vLLM mixed prefill+decode step, 8192 tokens, piecewise CUDA graphs (TraceLens, ROCm GPU with 304 CUs)"),
    ("sglang", "eager", "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
     "SGLang EXTEND (prefill) step, 15 requests / 15360 tokens, eager (TraceLens, ROCm)"),
    ("vllm", "eager", "b200/eager_trace.json.gz",
     "vLLM gpt-oss prefill, 888 tokens, eager, 8xB200 rank 0 (TraceLens)"),
)


def measure(path: Path) -> dict[str, float]:
    a = servescope.analyze_trace(str(path))
    s = a.ranks[0].steps[0]
    priced = sum(s.classes_us.get(c, 0.0) for c in PRICED)
    gap = s.idle_us / s.kernels
    small = max(s.gpu_busy_us - priced, 0.0) / s.kernels
    return {"kernels": s.kernels, "span_us": s.gpu_span_us, "busy_us": s.gpu_busy_us, "idle_us": s.idle_us,
            "gap_us_per_kernel": gap, "small_us_per_kernel": small, "per_kernel_us": gap + small}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    lines = ["# Per-kernel overheads measured from real engine traces by data-build/measure_engine_overheads.py",
             "# (GPU idle between kernels and the time of the kernels no roofline term prices, per kernel).",
             "# The perfmodel uses [<engine>.graph].per_kernel_us as kernel_overhead_s (decode in a CUDA graph).", ""]
    for engine, mode, rel, what in CASES:
        m = measure(TRACES / rel)
        print(f"{engine:6s} {mode:9s} kernels {m['kernels']:4.0f}  idle {m['idle_us']:10.1f} us  "
              f"gap {m['gap_us_per_kernel']:8.2f} us/kernel  small {m['small_us_per_kernel']:6.2f}  "
              f"total {m['per_kernel_us']:8.2f}")
        lines += [f"[{engine}.{mode}]", f'source = "../shared/traces/tracelens/{rel}: {what}"']
        lines += [f"{k} = {v:.6g}" for k, v in m.items()]
        lines.append("")
    if not args.dry_run:
        OUT.write_text("\n".join(lines), encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
