"""Measure GEMM efficiency vs M from the real traces in ../shared/traces and write it, with its source, to
src/servescope/specs/data/gemm_efficiency.toml (the perfmodel reads that file; it never reads traces).

Usage: .venv/bin/python data-build/measure_gemm_efficiency.py [--dry-run]

Per GEMM op instance in a Kineto trace (cpu_op aten::mm / addmm / linear / matmul with `Input Dims`):
  link          kernel `correlation` → launch (cuda_runtime / cuda_driver, same correlation) → its `External id`
                → the cpu_op with that External id (the kernel's own `External id` when present); every kernel
                linked to one op instance counts toward its time (split-K reductions included)
  shapes        mm [[M,K],[K,N]]; addmm [[bias],[M,K],[K,N]]; linear [[..,K],[N,K],(bias)] with M = Π leading dims;
                matmul [[..,K],[K,N]]
  FLOPs         2·M·N·K
  bytes         (M·K + K·N + M·N) · element bytes (bf16/fp16 2 B): A and B read once, C written once
  roofline_s    max(bytes / datasheet HBM BW, FLOPs / datasheet dense peak of the dtype)   (specs/data/gpus)
  ratio         dur / roofline_s  (≥ 1: how much slower than the datasheet roofline the kernel ran)
Per (GPU, M bucket) the written point is Σ dur / Σ roofline_s over the bucket's kernels (time-weighted), with the
trace file(s), kernel count and distinct shapes as its source. Buckets: powers of two in M (bucket of M = 2^round(log2 M)).
Kernels whose roofline is under MIN_ROOFLINE_US are left out of the curve (and counted): their time is the fixed
per-kernel ramp/tail (the B200 trace's TP=8 slices: 0.8-1.5 µs roofline, 6-8 µs measured), which the step model
prices apart (kernel_overhead_s / launch_overhead_s). In these traces the shaped kernels fall either under 1.5 µs or
over 200 µs, so any threshold between 2 and 200 µs selects the same kernels.
Regimes, for the step model: `mem_*` pools the kept kernels whose roofline is bandwidth-bound (bytes/BW ≥ FLOPs/peak),
`comp_*` the compute-bound ones: ratio = Σ dur / Σ roofline of the pool, with the largest (mem) / smallest (comp) M.
fp32 / TF32 GEMMs (training traces) are counted but not written: no fp32/TF32 peak is in specs/data/gpus.
The nsys SQLite traces carry no shapes (NVTX ranges name the op only) and are not used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from servescope.specs.hardware import load_gpu  # noqa: E402

# the shared copies; the same files (byte-identical) also sit under tests/data/traces for CI
TRACES = next((p for p in (ROOT.parent / "shared" / "traces", ROOT / "tests" / "data" / "traces") if p.is_dir()),
              ROOT / "tests" / "data" / "traces")
OUT = ROOT / "src/servescope/specs/data/gemm_efficiency.toml"
MIN_ROOFLINE_US = 5.0  # shorter kernels measure the fixed per-kernel cost, not the GEMM (see the docstring)
# (trace relative to TRACES, GPU spec name when deviceProperties has no usable name, what it is)
CASES = (
    ("tracelens/b200/eager_trace.json.gz", None, "vLLM gpt-oss prefill, 888 tokens, eager, 8xB200 TP=8 rank 0"),
    ("tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz", None,
     "SGLang Qwen3-8B EXTEND bs=15, 15360 tokens, eager"),
    ("tracelens/inference/vllm_decode_full/graph_execution.json.gz", "mi300x",
     "vLLM gpt-oss decode bs=32, FULL graph (only the eager logits GEMM has shapes); MI300X per reference §6.1"),
    ("tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz", "mi300x",
     "vLLM gpt-oss mixed 8192 tokens, piecewise graphs (only the eager logits GEMM has shapes); MI300X per §6.1"),
    ("hta/trace_diff/control/control.json.gz", None, "HTA training trace (A100, fp32/TF32)"),
    ("hta/negative_queue_length_values_check/rank0.json.gz", None, "HTA training trace (A100-80GB, fp32/TF32)"),
    ("hta/trace_diff/test/test.json.gz", None, "HTA training trace (V100, fp32)"),
)
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul")
GPU_NAMES = {"NVIDIA B200": "b200_sxm", "AMD Instinct MI300X": "mi300x", "NVIDIA A100-SXM4-80GB": "a100_sxm",
             "NVIDIA A100-PG509-200": "a100_sxm"}
DTYPES = {"c10::BFloat16": ("bf16", 2), "c10::Half": ("bf16", 2), "float": ("fp32", 4)}  # fp16 runs at the bf16 peak
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "Runtime")
_KERNEL_CATS = ("kernel", "Kernel")
_OP_CATS = ("cpu_op", "Operator")


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM op instance on the GPU: shapes from its cpu_op, time = Σ of its kernels (µs)."""

    trace: str
    gpu: str  # spec name, or the deviceProperties name when no spec matches
    op: str
    m: int
    n: int
    k: int
    dtype: str
    elem_bytes: int
    dur_us: float
    kernels: tuple[str, ...]

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        return float(self.m * self.k + self.k * self.n + self.m * self.n) * self.elem_bytes


def load_events(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(traceEvents, deviceProperties) of a Kineto JSON file, plain or gzip (stdlib json, strict=False)."""
    raw = gzip.open(path, "rt") if path.suffix == ".gz" else open(path)  # noqa: SIM115
    with raw as f:
        doc = json.loads(f.read(), strict=False)
    if isinstance(doc, list):
        return doc, []
    return doc.get("traceEvents", []), doc.get("deviceProperties") or []


def shapes(op: str, dims: list[list[int]]) -> tuple[int, int, int] | None:
    """(M, N, K) from a GEMM op's `Input Dims`, None when the layout is not a plain 2-d weight GEMM."""
    try:
        if op == "aten::mm":
            (m, k), (k2, n) = dims[0], dims[1]
        elif op == "aten::addmm":
            (m, k), (k2, n) = dims[1], dims[2]
        elif op == "aten::linear":
            a, (n, k2) = dims[0], dims[1]
            m, k = math.prod(a[:-1]), a[-1]
        else:  # aten::matmul: activations [.., K] @ a 2-d weight [K, N]
            a, w = dims[0], dims[1]
            if len(w) != 2:
                return None
            (k2, n), m, k = w, math.prod(a[:-1]), a[-1]
    except (ValueError, TypeError, IndexError):
        return None
    return (int(m), int(n), int(k)) if k == k2 and min(m, n, k) > 0 else None


def _gpu_name(props: list[dict[str, Any]], device: Any, fallback: str | None) -> str:
    names = {p.get("id"): p.get("name") or "" for p in props}
    name = names.get(device) or (props[0].get("name") if props else "") or ""
    return GPU_NAMES.get(name, fallback or name or "unknown")


def extract(path: Path, fallback_gpu: str | None = None) -> list[GemmKernel]:
    """Every GEMM op instance of one trace whose cpu_op carries shapes and whose kernels ran on a GPU."""
    events, props = load_events(path)
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") in _OP_CATS and e.get("name") in GEMM_OPS and "External id" in e.get("args", {})}
    launch_ext = {e["args"]["correlation"]: e["args"].get("External id") for e in events
                  if e.get("cat") in _LAUNCH_CATS and "correlation" in e.get("args", {})}
    per_op: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") not in _KERNEL_CATS:
            continue
        a = e.get("args", {})
        ext = a.get("External id") or launch_ext.get(a.get("correlation"))
        if ext in ops:
            per_op[ext].append(e)
    out = []
    parts = path.parts
    cut = max((i for i, x in enumerate(parts) if x == "traces"), default=len(parts) - 2)
    rel = "/".join(parts[cut + 1:])  # the path under traces/ (same under ../shared and tests/data)
    for ext, ks in per_op.items():
        op = ops[ext]
        args = op["args"]
        mnk = shapes(op["name"], args.get("Input Dims") or [])
        dt = DTYPES.get((args.get("Input type") or [""])[0] if op["name"] != "aten::addmm"
                        else (args.get("Input type") or ["", ""])[1])
        if mnk is None or dt is None:
            continue
        gpu = _gpu_name(props, ks[0].get("args", {}).get("device"), fallback_gpu)
        out.append(GemmKernel(rel, gpu, op["name"], *mnk, dt[0], dt[1],
                              sum(float(k["dur"]) for k in ks), tuple(sorted({k["name"] for k in ks}))))
    return out


def roofline_parts_s(g: GemmKernel) -> tuple[float, float] | None:
    """(bytes / datasheet HBM BW, FLOPs / datasheet dense peak) in seconds; None without a sourced peak."""
    try:
        spec = load_gpu(g.gpu)
    except Exception:  # noqa: BLE001 - an unknown GPU simply has no roofline
        return None
    peak = float(spec.flops_per_s.get(g.dtype) or 0.0)
    if peak <= 0:
        return None
    return g.bytes / float(spec.hbm_bw_bytes_per_s), g.flops / peak


def roofline_s(g: GemmKernel) -> float | None:
    """max(bytes / datasheet HBM BW, FLOPs / datasheet dense peak) in seconds; None without a sourced peak."""
    parts = roofline_parts_s(g)
    return max(parts) if parts else None


def kept(kernels: list[GemmKernel]) -> list[tuple[GemmKernel, float, bool]]:
    """(kernel, roofline_s, memory-bound) for the kernels the curve uses: a sourced peak, roofline ≥ MIN_ROOFLINE_US."""
    out = []
    for g in kernels:
        parts = roofline_parts_s(g)
        if parts and max(parts) >= MIN_ROOFLINE_US * 1e-6:
            out.append((g, max(parts), parts[0] >= parts[1]))
    return out


def m_bucket(m: int) -> int:
    """Power of two nearest to M in log scale."""
    return int(2 ** round(math.log2(m)))


def curve_points(kernels: list[GemmKernel]) -> dict[str, list[dict[str, Any]]]:
    """Per GPU, per M bucket: time-weighted ratio Σ dur / Σ roofline and its source."""
    acc: dict[tuple[str, int], list[tuple[GemmKernel, float]]] = defaultdict(list)
    for g, r, _ in kept(kernels):
        acc[(g.gpu, m_bucket(g.m))].append((g, r))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (gpu, mb), rows in sorted(acc.items()):
        dur_s = sum(g.dur_us for g, _ in rows) * 1e-6
        roof_s = sum(r for _, r in rows)
        out[gpu].append({
            "m": mb, "m_measured": sorted({g.m for g, _ in rows}), "ratio": round(dur_s / roof_s, 4),
            "kernels": len(rows), "shapes": sorted({(g.m, g.n, g.k) for g, _ in rows}),
            "dtype": sorted({g.dtype for g, _ in rows}), "traces": sorted({g.trace for g, _ in rows}),
            "achieved_tflops": round(sum(g.flops for g, _ in rows) / dur_s / 1e12, 1),
            "achieved_tb_per_s": round(sum(g.bytes for g, _ in rows) / dur_s / 1e12, 2),
        })
    return dict(out)


def regimes(kernels: list[GemmKernel]) -> dict[str, dict[str, float]]:
    """Per GPU: pooled ratio of the bandwidth-bound kept kernels (mem_ratio, mem_m_max, mem_kernels) and of the
    compute-bound ones (comp_ratio, comp_m_min, comp_kernels); a side with no kernel is absent."""
    pools: dict[tuple[str, bool], list[tuple[GemmKernel, float]]] = defaultdict(list)
    for g, r, mem in kept(kernels):
        pools[(g.gpu, mem)].append((g, r))
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (gpu, mem), rows in pools.items():
        side = "mem" if mem else "comp"
        ratio = sum(g.dur_us for g, _ in rows) * 1e-6 / sum(r for _, r in rows)
        ms = [g.m for g, _ in rows]
        out[gpu].update({f"{side}_ratio": round(ratio, 4), f"{side}_kernels": len(rows),
                         f"{side}_m_max" if mem else f"{side}_m_min": max(ms) if mem else min(ms)})
    return dict(out)


def coverage(kernels: list[GemmKernel]) -> list[str]:
    """One line per trace: GPU, GEMM op instances, dtypes, M range."""
    by: dict[str, list[GemmKernel]] = defaultdict(list)
    for g in kernels:
        by[g.trace].append(g)
    lines = []
    for tr, gs in by.items():
        ms = sorted({g.m for g in gs})
        n_kept = len(kept(gs))
        lines.append(f"{tr}: {gs[0].gpu}, {len(gs)} GEMMs ({n_kept} kept), dtypes {sorted({g.dtype for g in gs})}, "
                     f"{len(ms)} distinct M in [{ms[0]}, {ms[-1]}]")
    return lines


def to_toml(points: dict[str, list[dict[str, Any]]], reg: dict[str, dict[str, float]], cov: list[str]) -> str:
    lines = [
        "# GEMM time relative to the datasheet roofline vs M (rows of the GEMM), measured from real traces.",
        "# Written by data-build/measure_gemm_efficiency.py (formulas in its docstring); do not edit by hand.",
        "# ratio = Σ kernel dur / Σ max(bytes / datasheet HBM BW, 2·M·N·K / datasheet dense peak), per power-of-two",
        "# bucket of M. The step model (perfmodel/gemm_curve.py) uses mem_ratio up to mem_m_max, comp_ratio from",
        "# comp_m_min, interpolated in log M between; a GPU without both sides keeps the roofline × global fit.",
        f"# Kernels with a roofline under {MIN_ROOFLINE_US:g} us are left out (fixed per-kernel cost, priced apart).",
        "# Coverage (every trace with shaped GEMMs, fp32 ones not written: no fp32/TF32 peak in specs):",
        *[f"#   {c}" for c in cov], "",
    ]
    for gpu, pts in points.items():
        lines.append(f"[{gpu}]")
        lines.append("m = [" + ", ".join(str(p["m"]) for p in pts) + "]")
        lines.append("ratio = [" + ", ".join(str(p["ratio"]) for p in pts) + "]")
        lines.append("kernels = [" + ", ".join(str(p["kernels"]) for p in pts) + "]")
        lines += [f"{k} = {v}" for k, v in sorted(reg.get(gpu, {}).items())]
        src = "; ".join(f"M~{p['m']} (M {p['m_measured']}): {p['kernels']} kernels, {len(p['shapes'])} shapes, "
                        f"{'/'.join(p['dtype'])}, {p['achieved_tflops']} TFLOP/s, {p['achieved_tb_per_s']} TB/s, "
                        f"{', '.join(p['traces'])}" for p in pts)
        lines.append(f'source = "{src}"')
        lines.append("")
    return "\n".join(lines)


HOLDOUT = "tracelens/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz"


def holdout(kernels: list[GemmKernel]) -> dict[str, float]:
    """Out-of-sample check inside the interpolated gap: the dense GEMMs of the vLLM piecewise step (MI300X, 8192
    tokens, gpt-oss-20b) replay in CUDA graphs and carry no shapes, so none of them is in the curve. Shapes from the
    model (tests/data/planner/openai--gpt-oss-20b_config.json: hidden 2880, 64 q / 8 kv heads of 64, 32 experts):
    per layer qkv [M, 2880]x[2880, 5120], o [M, 4096]x[4096, 2880], router [M, 2880]x[2880, 32], M = 8192.
    Returns the measured Σ dur / Σ roofline of those kernels and the curve's ratio at M = 8192."""
    from servescope.perfmodel.gemm_curve import curve_for

    events, _ = load_events(TRACES / HOLDOUT)
    shaped = {n for g in kernels if g.trace == HOLDOUT for n in g.kernels}  # the eager logits GEMM
    dense = [e for e in events if e.get("cat") in _KERNEL_CATS and e["name"].startswith("Cijk_")
             and e["name"] not in shaped]
    m, layers = 8192, len(dense) // 3
    probe = [GemmKernel(HOLDOUT, "mi300x", "config", m, n, k, "bf16", 2, 0.0, ())
             for n, k in ((5120, 2880), (2880, 4096), (32, 2880))]
    roof_s = layers * sum(roofline_s(g) or 0.0 for g in probe)
    curve = curve_for(load_gpu("mi300x"))
    return {"kernels": len(dense), "layers": layers, "measured_ratio": sum(float(e["dur"]) for e in dense) * 1e-6 / roof_s,
            "curve_ratio": float(curve.ratio(np.array([m]))[0]) if curve else float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the data file")
    args = ap.parse_args()
    kernels: list[GemmKernel] = []
    for rel, gpu, what in CASES:
        if not (TRACES / rel).is_file():
            print(f"{rel}: not found under {TRACES}, skipped")
            continue
        ks = extract(TRACES / rel, gpu)
        print(f"{rel} ({what}): {len(ks)} shaped GEMM op instances")
        kernels += ks
    cov = coverage(kernels)
    print("\n".join(cov))
    points = curve_points(kernels)
    reg = regimes(kernels)
    print("regimes:", reg)
    for gpu, pts in points.items():
        for p in pts:
            print(f"{gpu:10s} M~{p['m']:>6d} ratio {p['ratio']:7.3f}  kernels {p['kernels']:>4d}  "
                  f"{p['achieved_tflops']:8.1f} TFLOP/s {p['achieved_tb_per_s']:6.2f} TB/s  shapes {p['shapes'][:4]}")
    if (TRACES / HOLDOUT).is_file():
        print("out-of-sample (MI300X, vLLM piecewise, M=8192, shapes from the config):", holdout(kernels))
    if not args.dry_run:
        OUT.write_text(to_toml(points, reg, cov), encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
