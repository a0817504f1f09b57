"""Measure, on one NVIDIA GPU, what a CUDA-graph-replayed decode step costs beyond its bandwidth roofline, per kernel.

What it does (needs torch with CUDA; run on the device machine, prints one JSON document, optionally writes it):
  1. achieved weight-read bandwidth: a bf16 GEMV-shaped product x(4×K) @ W(K×N) with W of 1 GiB and more
     (the access pattern of decode), and a device-to-device copy for comparison; the best of 20 timed runs;
  2. an empty-ish graph: 2,000 tiny element-wise kernels captured in one CUDA graph → the bare per-kernel cost;
  3. decode-like transformer layers (RMSNorm, fused QKV GEMM, grouped-query attention over a KV cache: QK^T, softmax, PV, output GEMM,
     RMSNorm, gate/up GEMM, SiLU·mul, down GEMM, residual adds) stacked `layers` deep, captured in one CUDA graph
     and replayed; per shape and batch: step time, bytes read (weights + KV), kernels per step (counted with
     torch.profiler on one eager forward: the graph replays the same kernels), and
       per_kernel_us = (step − bytes / achieved GEMV bandwidth) / kernels,
     the time a step spends beyond streaming its bytes at the achieved bandwidth, per kernel: launch gaps inside
     the graph plus each kernel's ramp-up/tail and the small kernels (norms, activations, adds) no roofline prices.
What it does not: model an engine's fused kernels (a PyTorch layer launches more, smaller kernels than vLLM's
fused ones; the per-kernel figure is what transfers), time prefill, or touch collectives.
Usage (device): python3 bench/measure_kernel_overhead_gpu.py [--out FILE]
Status: written for issue 7 in a session that had no GPU; NOT yet run. The model's per-kernel cost in a graph
(specs/data/engine_overheads.toml, 1.99 µs) is still the one measured on a ROCm vLLM trace and transferred to NVIDIA;
the dev rows' small-batch TPOT suggests more per kernel (bench/RESULTS.md, issue 7 physics section) — this
script is how to measure it on Hopper rather than fit it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

DT = torch.bfloat16
DEV = "cuda"
# (name, hidden, q heads, kv heads, head_dim, MLP intermediate) per GPU shard
SHAPES = [
    ("llama-3.1-70b/tp4", 8192, 16, 2, 128, 7168),
    ("llama-3.1-8b/tp1", 4096, 32, 8, 128, 14336),
    ("qwen3-32b/tp2", 5120, 32, 4, 128, 12800),
]
BATCHES = [1, 4, 16, 64]
CTX = 2048
LAYERS = 16


def timed(fn, reps: int = 20, warm: int = 3) -> float:
    """Best-of-`reps` seconds of fn() on the GPU (CUDA events)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        out.append(e0.elapsed_time(e1) / 1e3)
    return min(out)


def bandwidth() -> dict[str, float]:
    res = {}
    for k, n in ((8192, 65536), (8192, 131072)):
        w = torch.randn(k, n, dtype=DT, device=DEV) * 0.01
        x = torch.randn(4, k, dtype=DT, device=DEV)
        t = timed(lambda w=w, x=x: x @ w)
        res[f"gemv_{k}x{n}_tb_s"] = w.numel() * 2 / t / 1e12
        del w
    a = torch.empty(2 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    t = timed(lambda a=a, b=b: b.copy_(a))
    res["copy_read_plus_write_tb_s"] = 2 * a.numel() / t / 1e12
    del a, b
    torch.cuda.empty_cache()
    return res


def graphed(fn):
    """Capture fn() in a CUDA graph (after warm-up on a side stream); returns the replay callable."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def tiny_kernels(n: int = 2000) -> float:
    x = torch.zeros(256, device=DEV)

    def f() -> None:
        for _ in range(n):
            x.add_(1.0)

    return timed(graphed(f)) / n


class Stack:
    def __init__(self, h: int, nq: int, nkv: int, d: int, inter: int, batch: int) -> None:
        def r(*s: int) -> torch.Tensor:
            return torch.randn(*s, dtype=DT, device=DEV) * 0.02
        self.nq, self.nkv, self.d, self.b = nq, nkv, d, batch
        self.layers = [dict(wqkv=r(h, (nq + 2 * nkv) * d), wo=r(nq * d, h), wgu=r(h, 2 * inter), wd=r(inter, h),
                            n1=torch.ones(h, dtype=DT, device=DEV), n2=torch.ones(h, dtype=DT, device=DEV),
                            k=r(batch, nkv, CTX, d), v=r(batch, nkv, CTX, d)) for _ in range(LAYERS)]
        self.x = r(batch, h)
        self.h = h
        self.bytes = sum(sum(t.numel() * t.element_size() for t in lay.values()) for lay in self.layers)

    def forward(self) -> torch.Tensor:
        x, b, nq, nkv, d, h = self.x, self.b, self.nq, self.nkv, self.d, self.h
        for lay in self.layers:
            res = x
            y = F.rms_norm(x, (h,), lay["n1"])
            qkv = y @ lay["wqkv"]
            q = qkv[:, : nq * d].view(b, nkv, nq // nkv, d)  # grouped query heads share one KV head
            s = torch.softmax((q @ lay["k"].transpose(-1, -2)).float() * d**-0.5, dim=-1).to(DT)
            a = s @ lay["v"]  # (b, nkv, group, d): K and V are each read once
            x = a.reshape(b, nq * d) @ lay["wo"] + res
            res = x
            y = F.rms_norm(x, (h,), lay["n2"])
            g, u = (y @ lay["wgu"]).chunk(2, dim=-1)
            x = (F.silu(g) * u) @ lay["wd"] + res
        return x


def kernels_per_call(fn) -> int:
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in p.events() if e.device_type.name == "CUDA")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    t0 = time.time()
    doc: dict[str, object] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "layers": LAYERS, "context": CTX}
    bw = bandwidth()
    doc["bandwidth"] = bw
    gemv_bw = max(v for k, v in bw.items() if k.startswith("gemv")) * 1e12
    doc["tiny_kernel_in_graph_us"] = tiny_kernels() * 1e6
    rows = []
    for name, h, nq, nkv, d, inter in SHAPES:
        for b in BATCHES:
            try:
                st = Stack(h, nq, nkv, d, inter, b)
                step = timed(graphed(st.forward))
                n_k = kernels_per_call(st.forward)
            except Exception as e:  # one failing shape must not lose the others
                print(json.dumps({"shape": name, "batch": b, "error": repr(e)[:300]}), flush=True)
                continue
            roof = st.bytes / gemv_bw
            rows.append({"shape": name, "batch": b, "step_us": step * 1e6, "bytes": st.bytes, "kernels": n_k,
                         "roofline_us": roof * 1e6, "per_kernel_us": (step - roof) / n_k * 1e6})
            print(json.dumps(rows[-1]), flush=True)
            del st
            torch.cuda.empty_cache()
    doc["steps"] = rows
    doc["per_kernel_us_median"] = statistics.median(r["per_kernel_us"] for r in rows)
    doc["per_kernel_us_median_batch_le_16"] = statistics.median(r["per_kernel_us"] for r in rows if r["batch"] <= 16)
    doc["seconds"] = time.time() - t0
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
