"""Measure, in the real engine traces of ../shared/traces/tracelens, the per-step cost that the decode step's roofline
terms do not price for MoE models — the expert-routing kernels of every MoE layer — and the host time of a decode
step; write them, with their source, to src/servescope/specs/data/step_host_cost.toml (perfmodel/moe_host.py reads
its [model] section; the model never reads traces itself).

Usage: .venv/bin/python data-build/measure_step_host_cost.py [--dry-run] [--traces DIR]

Routing kernels (`routing_rows`): the GPU rows (kernels, memcpy, memset) of a trace that servescope's classify stage
puts in the `moe` class and that are not an expert GEMM (`EXPERT_GEMM`: triton_kernels `_matmul_ogs_*`, TRT-LLM-gen
`bmm_*`, vLLM/SGLang `fused_moe_kernel`, grouped/MoE GEMMs): input padding, top-k, histogram / bitmatrix sums,
memsets, offsets, expert-index compute, finalize / unpermute-scatter. Their bytes are a few kB at decode batches, so
the roofline prices them at ~0 and their time is each kernel's floor. They are classified `moe`, so the measured
per-kernel overhead (engine_overheads.toml: idle + the unpriced small classes norm, rotary, cast, ... per kernel)
does not hold their time either. Per trace: the count per MoE layer (routing kernels / MoE layers, the layers from
measure_kernels_per_layer.segment), the median and minimum duration of one routing kernel, their mean time per layer.
Host time of the decode step (`host_times`, the FULL-graph decode trace only: the one decode step bundled): the
engine's `execute_*` CPU annotation (vLLM execute_model: input preparation, graph launch, the eager logits
computation), split at its graph launch (hipGraphLaunch / cudaGraphLaunch) into before, launch and after.
What it does not: time the scheduler or the sampler (neither is inside these traces: sampling runs after the
traced execute_model) or fit anything.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import polars as pl  # noqa: E402
from measure_kernels_per_layer import gpu_rows, segment  # noqa: E402

from servescope.analysis.classify import classify  # noqa: E402
from servescope.trace import load_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "tracelens"
OUT = ROOT / "src/servescope/specs/data/step_host_cost.toml"
GPU_KINDS = ("kernel", "memcpy", "memset")
EXPERT_GEMM = re.compile(r"_matmul_ogs_|^bmm_|fused_moe_kernel|grouped_?gemm|moe_gemm", re.IGNORECASE)
GRAPH_LAUNCH = re.compile(r"^(hip|cuda)GraphLaunch")
# (key, trace relative to TRACES, GPU vendor, what it is)
CASES = (
    ("vllm_graph_decode", "inference/vllm_decode_full/graph_execution.json.gz", "amd",
     "vLLM decode of gpt-oss-20b, FULL CUDA-graph replay, batch 32, ROCm GPU with 304 CUs (MI300X class)"),
    ("vllm_piecewise_mixed", "inference/vllm_prefilldecode_piecewise/graph_execution.json.gz", "amd",
     "vLLM mixed prefill+decode step of gpt-oss-20b, 8192 tokens, piecewise CUDA graphs, ROCm GPU with 304 CUs"),
    ("vllm_eager_prefill_b200", "b200/eager_trace.json.gz", "nvidia",
     "vLLM prefill of gpt-oss-120b, 888 tokens, eager, 8xB200 TP=8 rank 0 (TRT-LLM-gen MoE routing kernels)"),
)


@dataclass(frozen=True)
class Routing:
    """The routing kernels of one step: count, MoE layers, median / min duration of one kernel, their names."""

    kernels: int
    moe_layers: int
    median_us: float
    min_us: float
    total_us: float
    names: tuple[str, ...]

    @property
    def per_layer(self) -> float:
        return self.kernels / self.moe_layers

    @property
    def per_layer_us(self) -> float:
        return self.total_us / self.moe_layers


def _gpu(path: Path) -> pl.DataFrame:
    ev = classify(load_trace(str(path)).events)
    return ev.filter(pl.col("kind").is_in(GPU_KINDS)).sort("ts_us")


def routing_rows(path: Path) -> list[tuple[str, float]]:
    """(name, duration µs) of every routing kernel of a trace (module docstring), in time order."""
    g = _gpu(path).filter(pl.col("kernel_class") == "moe")
    return [(str(n), float(d)) for n, d in g.select("name", "dur_us").iter_rows()
            if not EXPERT_GEMM.search(str(n))]


def measure_routing(path: Path) -> Routing:
    rows = routing_rows(path)
    seg = segment(gpu_rows(path))
    if seg.mlp_kind != "moe" or not rows:
        raise ValueError(f"{path}: no MoE routing kernels")
    durs = [d for _, d in rows]
    names = tuple(dict.fromkeys(_short(n) for n, _ in rows))
    return Routing(len(rows), seg.layers, statistics.median(durs), min(durs), sum(durs), names)


def _short(name: str) -> str:
    """A kernel name without template arguments or parameters (`void ns::kernel<...>(...)` -> `ns::kernel`)."""
    return name.removeprefix("void ").split("<")[0].split("(")[0]


def host_times(path: Path) -> dict[str, float]:
    """CPU time of the step's execute annotation (µs): total, before its graph launch, the launch, after it."""
    ev = load_trace(str(path)).events
    ann = ev.filter((pl.col("kind") == "user_annotation") & pl.col("name").str.starts_with("execute_"))
    launch = ev.filter((pl.col("kind") == "runtime") & pl.col("name").str.contains(GRAPH_LAUNCH.pattern))
    if ann.height != 1 or launch.height != 1:
        raise ValueError(f"{path}: {ann.height} execute annotations, {launch.height} graph launches (want 1, 1)")
    a0, ad = float(ann["ts_us"][0]), float(ann["dur_us"][0])
    l0, ld = float(launch["ts_us"][0]), float(launch["dur_us"][0])
    return {"execute_cpu_us": ad, "before_launch_us": l0 - a0, "graph_launch_us": ld,
            "after_launch_us": a0 + ad - (l0 + ld)}


def _g(x: float) -> str:
    return f"{x:.6g}"


def trace_section(key: str, rel: str, vendor: str, what: str, r: Routing) -> list[str]:
    return [
        f"[trace.{key}]", f'source = "../shared/traces/tracelens/{rel}: {what}"', f'vendor = "{vendor}"',
        f"routing_kernels = {r.kernels}", f"moe_layers = {r.moe_layers}",
        f"routing_kernels_per_moe_layer = {_g(r.per_layer)}", f"routing_kernel_median_us = {_g(r.median_us)}",
        f"routing_kernel_min_us = {_g(r.min_us)}", f"routing_us_per_moe_layer = {_g(r.per_layer_us)}",
        f'routing_kernel_names = "{", ".join(r.names)}"', "",
    ]


def model_section(r: dict[str, Routing]) -> list[str]:
    """What perfmodel/moe_host.py uses: the count per MoE layer of the one decode trace (the same trace as the
    kernel count `moe` of kernel_counts.toml), the duration of one routing kernel per GPU vendor."""
    dec, nv = r["vllm_graph_decode"], r["vllm_eager_prefill_b200"]
    return [
        "[model]",
        f"routing_kernels_per_moe_layer = {_g(dec.per_layer)}",
        "# measured: [trace.vllm_graph_decode] (gpt-oss MXFP4 on vLLM's triton_kernels routing, the stack vLLM also",
        "# runs for MXFP4 experts on Hopper); other MoE stacks transferred ([trace.vllm_eager_prefill_b200]'s",
        "# TRT-LLM-gen stack runs 4: 3 routing + finalize, with its 2 input-quantize kernels counted as casts).",
        f"routing_kernel_us_amd = {_g(dec.median_us)}",
        "# measured: median of [trace.vllm_graph_decode]'s routing kernels (decode batch 32, graph replay).",
        f"routing_kernel_us_nvidia = {_g(nv.median_us)}",
        "# measured: median of [trace.vllm_eager_prefill_b200]'s routing kernels (B200, 888 prompt tokens: at most",
        "# the decode floor, as these kernels' work grows with tokens; no Hopper trace with MoE kernels is bundled).",
        "",
    ]


def host_section(h: dict[str, float]) -> list[str]:
    return [
        "[host.vllm_graph_decode]",
        'source = "../shared/traces/tracelens/inference/vllm_decode_full/graph_execution.json.gz: the execute_32_...'
        ' user annotation (vLLM execute_model, batch 32) and its hipGraphLaunch"',
        "# not used by the model: the step's host time is cpu_overhead_s (efficiency.toml), fitted; these say what",
        "# one measured execute_model holds (the scheduler and the sampler run outside it).",
        *(f"{k} = {_g(v)}" for k, v in h.items()), "",
    ]


def render(traces: Path) -> str:
    """The text of step_host_cost.toml measured on the traces under `traces` (one line per trace printed)."""
    lines = ["# Per-step costs the decode step's roofline terms do not price, measured in real engine traces by",
             "# data-build/measure_step_host_cost.py (what is measured and how: that script's docstring).",
             "# perfmodel/moe_host.py reads [model]; the [trace.*] and [host.*] sections are the measurements.", ""]
    r: dict[str, Routing] = {}
    body: list[str] = []
    for key, rel, vendor, what in CASES:
        x = r[key] = measure_routing(traces / rel)
        print(f"{key:24s} {x.kernels:4d} routing kernels / {x.moe_layers} MoE layers = {x.per_layer:.2f} per layer, "
              f"median {x.median_us:.2f} us, min {x.min_us:.2f} us, {x.per_layer_us:.1f} us per layer")
        body += trace_section(key, rel, vendor, what, x)
    h = host_times(traces / CASES[0][1])
    print("host (vllm_graph_decode): " + ", ".join(f"{k} {v:.1f}" for k, v in h.items()))
    return "\n".join(lines + model_section(r) + body + host_section(h))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--traces", type=Path, default=TRACES, help="folder holding the tracelens traces")
    args = ap.parse_args()
    text = render(args.traces)
    if not args.dry_run:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
