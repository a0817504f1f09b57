"""Count kernels per step and per layer part in the real engine traces of ../shared/traces/tracelens and write the
counts, with their source, to src/servescope/specs/data/kernel_counts.toml (perfmodel/ops.py reads the
[model] section of that file; it never reads traces itself).

Usage: .venv/bin/python data-build/measure_kernels_per_layer.py [--dry-run]

How a trace is cut into layers (`segment`): the GPU rows (kernels, memcpy, memset) of the trace's one step, in
time order, classified by servescope's classify stage. A block starts at a `norm` kernel immediately followed by a
`gemm` kernel (the residual RMSNorm before the QKV projection or before the router / gate-up GEMM; a per-head q/k
norm is followed by a cast or rotary, the final norm by a copy or gather, so neither starts a block). A block that
holds an `attention` kernel is an attention block; otherwise it is an MoE block when it holds a `moe` kernel, else a
dense-MLP block. A layer is an attention block and the MLP block after it. The last block ends at the final norm
(the first norm after the last block start that does not start a block). Kernels before the first block start
(input copies, embedding) and from the final norm on (final norm, logits gather, lm_head, sampling) are per step.
Kernels on a stream other than the one that runs most kernels are per step too (an overlapped side stream).
Collectives are priced apart by the step model, so `communication` kernels and the copies next to them (the
staging copies of a symmetric-memory all-reduce) are counted apart (`collective_kernels`), not in any block.
What it does not do: time anything (data-build/measure_engine_overheads.py measures the per-kernel cost).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import polars as pl  # noqa: E402

from servescope.analysis.classify import classify  # noqa: E402
from servescope.trace import load_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces" / "tracelens"
OUT = ROOT / "src/servescope/specs/data/kernel_counts.toml"
GPU_KINDS = ("kernel", "memcpy", "memset")
# (key, trace relative to TRACES, engine and step, model and the evidence for it)
CASES = (
    ("vllm_graph_decode", "inference/vllm_decode_full/graph_execution.json.gz",
     "vLLM decode, FULL CUDA-graph replay, batch 32 (capture_traces/execution_details.json), ROCm GPU with 304 CUs",
     "gpt-oss-20b: 24 layers counted; MXFP4 routed experts (_matmul_ogs_..._bf16xbf16xmxfp4 kernels, triton_kernels "
     "routing), alternating sliding (kernel_unified_attention_2d) and full (3d + reduce_segments) attention layers; "
     "gpt-oss-20b has 24 layers, gpt-oss-120b 36 (config.json num_hidden_layers)"),
    ("vllm_piecewise_mixed", "inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
     "vLLM mixed prefill+decode step, 8192 tokens, piecewise CUDA graphs, ROCm GPU with 304 CUs",
     "gpt-oss-20b: the same kernels and 24 layers as the FULL-graph decode trace"),
    ("sglang_eager_prefill", "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
     "SGLang EXTEND (prefill) step, 15 requests / 15360 tokens, eager, ROCm",
     "Qwen3-8B (file name): 36 layers counted (Qwen3-8B config.json num_hidden_layers 36); dense SwiGLU MLP "
     "(act_and_mul), per-head q/k RMSNorm in the attention block"),
    ("vllm_eager_prefill_b200", "b200/eager_trace.json.gz",
     "vLLM prefill, 888 tokens, eager, 8xB200 TP=8 rank 0",
     "gpt-oss-120b: 36 layers counted (gpt-oss-120b config.json num_hidden_layers 36, gpt-oss-20b has 24); MXFP4 "
     "experts (TRT-LLM bmm_..._MxE2m1 kernels), sliding/full attention (fmhaSm100a ...SlidingOrChunked / Causal)"),
)


@dataclass(frozen=True)
class Segments:
    """One step cut into blocks. Counts are kernels (GPU rows); `attention`/`mlp` hold one count per layer."""

    total: int
    attention: tuple[int, ...]
    mlp: tuple[int, ...]
    mlp_kind: str  # "moe" | "dense"
    head: int
    tail: int
    side_stream: int
    collective: int
    attention_classes: dict[str, int]  # summed over all layers
    mlp_classes: dict[str, int]

    @property
    def layers(self) -> int:
        return len(self.attention)

    @property
    def step(self) -> int:
        """Per-step kernels outside any layer, collectives excluded: head + tail + side stream."""
        return self.head + self.tail + self.side_stream


def gpu_rows(path: Path) -> list[tuple[str, str, str]]:
    """(name, kernel_class, stream) of every GPU row of a trace, in time order."""
    ev = classify(load_trace(str(path)).events)
    g = ev.filter(pl.col("kind").is_in(GPU_KINDS)).sort("ts_us")
    return [(str(n), str(c), str(s)) for n, c, s in g.select("name", "kernel_class", "stream").iter_rows()]


def _collective_mask(cls: list[str]) -> list[bool]:
    """Communication kernels and the memory copies right next to one (symmetric-memory staging copies)."""
    comm = [c == "communication" for c in cls]
    near = [c == "memory" and ((i > 0 and comm[i - 1]) or (i + 1 < len(cls) and comm[i + 1]))
            for i, c in enumerate(cls)]
    return [a or b for a, b in zip(comm, near, strict=True)]


def segment(rows: list[tuple[str, str, str]]) -> Segments:
    """Cut one step's GPU rows (name, class, stream) into per-step, attention and MLP kernels (module docstring)."""
    main = Counter(s for _, _, s in rows).most_common(1)[0][0]
    on_main = [r for r in rows if r[2] == main]
    coll = _collective_mask([c for _, c, _ in on_main])
    seq = [r[1] for r, x in zip(on_main, coll, strict=True) if not x]
    starts = [i for i in range(len(seq) - 1) if seq[i] == "norm" and seq[i + 1] == "gemm"]
    if len(starts) < 2 or len(starts) % 2:
        raise ValueError(f"{len(starts)} block starts (norm then gemm): not attention/MLP pairs")
    end = next((i for i in range(starts[-1] + 1, len(seq)) if seq[i] == "norm"), len(seq))
    blocks = [seq[a:b] for a, b in zip(starts, [*starts[1:], end], strict=True)]
    attn, mlp = blocks[0::2], blocks[1::2]
    if not all("attention" in b for b in attn) or any("attention" in b for b in mlp):
        raise ValueError("blocks do not alternate attention / MLP")
    kinds = {"moe" if "moe" in b else "dense" for b in mlp}
    if len(kinds) != 1:
        raise ValueError(f"mixed MLP kinds {sorted(kinds)}")
    return Segments(
        total=len(rows), attention=tuple(len(b) for b in attn), mlp=tuple(len(b) for b in mlp),
        mlp_kind=kinds.pop(), head=starts[0], tail=len(seq) - end, side_stream=len(rows) - len(on_main),
        collective=sum(coll), attention_classes=dict(Counter(c for b in attn for c in b)),
        mlp_classes=dict(Counter(c for b in mlp for c in b)),
    )


def _mean(xs: tuple[int, ...]) -> float:
    return round(statistics.fmean(xs), 6)


def _classes(counts: dict[str, int], layers: int) -> str:
    return ", ".join(f"{k} {v / layers:.3g}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def trace_section(key: str, rel: str, what: str, model: str, s: Segments) -> list[str]:
    n = s.layers
    return [
        f"[trace.{key}]", f'source = "../shared/traces/tracelens/{rel}: {what}"', f'model = "{model}"',
        f"kernels = {s.total}", f"layers = {n}", f'mlp_kind = "{s.mlp_kind}"',
        f"attention_per_layer = {_mean(s.attention)}", f"attention_min = {min(s.attention)}",
        f"attention_max = {max(s.attention)}",
        f"mlp_per_layer = {_mean(s.mlp)}", f"mlp_min = {min(s.mlp)}", f"mlp_max = {max(s.mlp)}",
        f"step_kernels = {s.step}", f"head_kernels = {s.head}", f"tail_kernels = {s.tail}",
        f"side_stream_kernels = {s.side_stream}", f"collective_kernels = {s.collective}",
        f'attention_classes_per_layer = "{_classes(s.attention_classes, n)}"',
        f'mlp_classes_per_layer = "{_classes(s.mlp_classes, n)}"', "",
    ]


def model_section(seg: dict[str, Segments]) -> list[str]:
    """What perfmodel/ops.py uses: decode in a CUDA graph (what TPOT and kernel_overhead_s price) where a trace of
    that architecture family exists; the rest transferred or typical, each saying so."""
    dec, dense = seg["vllm_graph_decode"], seg["sglang_eager_prefill"]
    gqa = _mean(dec.attention)
    return [
        "[model]",
        "# kernels per layer part used by perfmodel/ops.py (collectives counted apart); each with its source",
        f"attention = {gqa}",
        '# measured: [trace.vllm_graph_decode] (GQA with sinks, sliding/full alternating; decode in a FULL graph).',
        "# Used for every attention or mixer layer (GQA; linear-attention / Mamba / V4 layers: transferred, no trace).",
        "mla_extra = 5",
        "# typical, not measured (no MLA trace bundled): MLA adds 5 ops to the attention block above, each at least",
        "# one kernel - q_a_layernorm and kv_a_layernorm (RMSNorm), q_b_proj (GEMM), and in absorbed decode the",
        "# W_UK and W_UV batched GEMMs (DeepSeek-V3 MLA; vLLM MLA decode absorbs k/v up-projections).",
        f"moe = {_mean(dec.mlp)}",
        "# measured: [trace.vllm_graph_decode] (norm, router GEMM, routing (pad, top-k, histogram, memset, compute),",
        "# two grouped expert GEMMs, finalize/scatter); other MoE kernel stacks transferred.",
        f"dense_mlp = {_mean(dense.mlp)}",
        "# measured: [trace.sglang_eager_prefill] (norm, gate_up GEMM, act_and_mul, down GEMM; Qwen3-8B).",
        "shared_expert = 3",
        "# typical, not measured (no trace of a model with shared experts): gate_up GEMM, activation, down GEMM.",
        f"step = {dec.step}",
        "# measured: [trace.vllm_graph_decode] head + tail (input copies, embedding, final norm, logits gather and",
        "# lm_head; sampling ran outside this trace).", "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    lines = ["# Kernels per step and per layer part counted in real engine traces by data-build/measure_kernels_per_layer.py",
             "# (how a trace is cut into layers: that script's docstring). Counts are GPU rows (kernels, memcpy,",
             "# memset); collectives are counted apart, as the step model prices them apart.", ""]
    seg: dict[str, Segments] = {}
    for key, rel, what, model in CASES:
        s = seg[key] = segment(gpu_rows(TRACES / rel))
        print(f"{key:24s} {s.total:4d} kernels, {s.layers:2d} layers: attention {_mean(s.attention):5.2f} "
              f"({min(s.attention)}-{max(s.attention)}), {s.mlp_kind} {_mean(s.mlp):5.2f} "
              f"({min(s.mlp)}-{max(s.mlp)}), step {s.step} (head {s.head}, tail {s.tail}, side {s.side_stream}), "
              f"collective {s.collective}")
        lines += trace_section(key, rel, what, model.split(":")[0] + " (" + model.split(": ", 1)[1] + ")", s)
    lines = lines[:4] + model_section(seg) + lines[4:]
    if not args.dry_run:
        OUT.write_text("\n".join(lines), encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
