"""The bounds every measured per-op curve is held to in a deployment: its shape's physical floor and 3× its roofline.

What it does: for the kernels a measured curve prices (measured_ops.py), per layer and per GPU, in SECONDS:
    floor(s) = max(bytes(s) / datasheet HBM BW, FLOPs(s) / datasheet peak of the fastest dtype the kernel may use)
    roof(s)  = max(bytes(s) / (achieved BW · bw_eff), FLOPs(s) / (datasheet peak · compute_eff))
               + kernels · kernel_overhead_s
               — the model's own datasheet × efficiency price of the kernel, the price that stands in where the curve
               is refused: achieved = datasheet × hbm_bw_efficiency; bw_eff, compute_eff the class's fitted
               efficiencies of the curve-free fit (efficiency.toml [roofline]: fixed while a fit moves the others, so
               a refusal never flips inside a fit); kernels the ones the curve prices, each at the measured
               per-kernel cost in a CUDA graph (Efficiency.kernel_overhead_s).
with bytes and FLOPs of the model's own kernel (the same counts as ops.py's roofline terms):
    decode attention, GQA   b·(L·2·kvh·d·kv + 4·h·d) bytes (KV read, query in, output out) ; 4·b·h·d·L FLOPs
    decode attention, MLA   b·(L·(r + p)·kv + 4·h·(r + p)) ; 2·b·h·L·(2·r + p)          (r kv_lora, p rope)
    prefill attention, GQA  b·S·(2·h + 2·kvh)·d·2 ; 2·b·h·d·S²                         (causal, no cached prefix)
    prefill attention, MLA  b·S·h·(2·(n + p) + 2·v)·2 ; b·h·S²·(n + p + v)              (n qk_nope, v v_head)
(h, kvh per GPU; L the KV tokens read: min(L, window) for sliding layers, min(L, top-k) under DSA; kv the KV dtype's
bytes.) `bounded(curve, floor, roof)` = min(max(curve, floor), MAX_OVER_ROOFLINE · roof): every lookup lies in
[floor, 3·roof]. `over_roofline` = the largest curve/roof at the probe shapes: above MAX_OVER_ROOFLINE the curve is
refused for the deployment (measured_ops.py says so).
`family_on(sc, family)`: whether a curve family (FAMILIES) may price this deployment's domain (GPU system, engine):
off where DOMAIN_OFF lists the domain — decided by cross-validated error on the dev rows of that domain
(bench/curve_domains.py; bench/RESULTS.md 2026-12-07).
What it does not: look curves up (opcurve.py) or price the step (step.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel.efficiency import Efficiency, roofline_efficiency
from servescope.perfmodel.ops import achieved_bw_bytes_per_s, peak_flops

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

Arr = np.ndarray
# A curve above this multiple of its roofline at 100 % of the achieved bandwidth and of the peak is not the engine's
# serving kernel (a reference path: e.g. `moe_torch_flow` MXFP4 on B200 at 4–7×, vLLM's fp8-block GEMMs on B200 at
# 6–23× bf16), while the serving kernels measured sit at 0.9–1.6× (median per scenario over the dev rows' MoE layers).
MAX_OVER_ROOFLINE = 3.0
# the deployment's decode batches per GPU the refusal is judged at (the bounds test's grid: 1–512)
PROBE_BATCH = np.array([1.0, 4.0, 16.0, 64.0, 256.0, 512.0])
# Attention kernels per decode layer a measured attention curve prices (the rest of the layer's kernels stay in
# the per-kernel overhead): 2.5, counted in vLLM's FULL-graph decode trace (specs/data/kernel_counts.toml
# [trace.vllm_graph_decode] attention_classes_per_layer "attention 2.5": unified attention 2d/3d + reduce).
ATTENTION_KERNELS_PER_LAYER = 2.5


FAMILIES = ("gemm", "decode_attention", "prefill_attention", "moe")
# (GPU system, engine, family) → why that family's curves are off there by default: where the dev CSV has rows in
# the domain, the curve stays on only if it lowers their leave-one-model-out error (bench/curve_domains.py)
_DEV = ("dev rows: LOMO TPOT / TTFT MAPE with the curve {} vs {} without (bench/curve_domains.py, 2026-12-07, "
        "each domain judged with the others as shipped)")
DOMAIN_OFF: dict[tuple[str, str, str], str] = {
    ("b200_sxm", "sglang", "moe"): _DEV.format("26.5 % / 71.5 %", "12.0 % / 72.8 %"),
    ("b200_sxm", "trtllm", "decode_attention"): _DEV.format("14.8 % / 37.4 %", "13.9 % / 37.8 %"),
    ("b200_sxm", "trtllm", "gemm"): _DEV.format("16.3 % / 44.7 %", "14.5 % / 37.4 %"),
    ("b200_sxm", "trtllm", "prefill_attention"): _DEV.format("11.2 % / 42.1 %", "12.6 % / 34.9 %"),
    ("b200_sxm", "vllm", "decode_attention"): _DEV.format("19.4 % / 19.9 %", "16.0 % / 20.1 %"),
    ("b200_sxm", "vllm", "gemm"): _DEV.format("13.8 % / 28.7 %", "19.4 % / 19.9 %"),
    ("h100_sxm", "vllm", "decode_attention"): _DEV.format("34.1 % / 51.1 %", "31.1 % / 51.2 %"),
    ("h100_sxm", "vllm", "gemm"): _DEV.format("26.6 % / 59.6 %", "31.1 % / 51.2 %"),
    ("h100_sxm", "vllm", "prefill_attention"): _DEV.format("14.4 % / 46.8 %", "15.2 % / 40.9 %"),
}


# the domains where the dev CSV has rows a curve prices (bench/curve_domains.py --domains, 2026-12-07); elsewhere the
# domain, version and bound rules alone decide, and the provenance says "no measured rows in this domain"
MEASURED_DOMAINS = frozenset({
    ("b200_sxm", "sglang", "decode_attention"), ("b200_sxm", "sglang", "gemm"), ("b200_sxm", "sglang", "moe"),
    ("b200_sxm", "sglang", "prefill_attention"), ("b200_sxm", "trtllm", "decode_attention"),
    ("b200_sxm", "trtllm", "gemm"), ("b200_sxm", "trtllm", "prefill_attention"), ("b200_sxm", "vllm", "decode_attention"),
    ("b200_sxm", "vllm", "gemm"), ("b200_sxm", "vllm", "moe"), ("b200_sxm", "vllm", "prefill_attention"),
    ("h100_sxm", "sglang", "gemm"), ("h100_sxm", "vllm", "decode_attention"), ("h100_sxm", "vllm", "gemm"),
    ("h100_sxm", "vllm", "prefill_attention"),
})


def rows_note(sc: Deployment, family: str) -> str:
    """'; no measured rows in this domain …' where the dev CSV has none for (GPU, engine, family), else ''."""
    if (sc.gpu.name, sc.backend, family) in MEASURED_DOMAINS:
        return ""
    return "; no measured rows in this domain: its domain and the 3× bound decide"


def family_on(sc: Deployment, family: str) -> bool:
    """Whether `family`'s measured curves may price this deployment (not listed in DOMAIN_OFF)."""
    return (sc.gpu.name, sc.backend, family) not in DOMAIN_OFF


def _kernel_s(sc: Deployment) -> float:
    return float(np.mean(sc.efficiency.kernel_overhead_s))


@lru_cache(maxsize=1)
def _eff() -> Efficiency:
    return roofline_efficiency()


def _fast_peak(sc: Deployment) -> float:
    """The fastest dense peak attention may use here (fp8 with an fp8 KV cache, else bf16): the floor's FLOP rate."""
    return peak_flops(sc.gpu, "fp8" if sc.quant.kv.name.startswith("fp8") else "bf16")


def decode_attention(sc: Deployment, b: Arr, kv_len: Arr, kv_bytes: float | None = None) -> tuple[Arr, Arr]:
    """(floor, roof) in seconds of ONE full-attention layer's decode kernel at b sequences over kv_len tokens
    (`kv_bytes`: another KV element size than the deployment's)."""
    m = sc.model
    kv = float(sc.quant.kv.bytes_per_param) if kv_bytes is None else kv_bytes
    h = m.n_heads / sc.tp
    if m.attention_kind == "mla":
        lat = float(m.kv_lora_rank + m.qk_rope_head_dim)
        nbytes = b * (kv_len * lat * kv + 4.0 * h * lat)
        fl = 2.0 * b * h * kv_len * (2.0 * m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        kvh = max(m.n_kv_heads // sc.tp, 1)
        nbytes = b * (kv_len * 2.0 * kvh * m.head_dim * kv + 4.0 * h * m.head_dim)
        fl = 4.0 * b * h * m.head_dim * kv_len
    return _pair(sc, nbytes, fl, ATTENTION_KERNELS_PER_LAYER)


def prefill_attention(sc: Deployment, b: Arr, isl: Arr) -> tuple[Arr, Arr]:
    """(floor, roof) in seconds of ONE full-attention layer's prefill kernel: b prompts of isl new tokens."""
    m = sc.model
    h = m.n_heads / sc.tp
    if m.attention_kind == "mla":
        qk = float(m.qk_nope_head_dim + m.qk_rope_head_dim)
        nbytes = b * isl * h * (2.0 * qk + 2.0 * m.v_head_dim) * 2.0
        fl = b * h * isl * isl * (qk + m.v_head_dim)
    else:
        kvh = max(m.n_kv_heads // sc.tp, 1)
        nbytes = b * isl * (2.0 * h + 2.0 * kvh) * m.head_dim * 2.0
        fl = 2.0 * b * h * m.head_dim * isl * isl
    return _pair(sc, nbytes, fl, ATTENTION_KERNELS_PER_LAYER)


def gemm(sc: Deployment, n: int, k: int, weight_bytes: float, dtype: str, m_rows: Arr) -> tuple[Arr, Arr]:
    """(floor, roof) in seconds of one GEMM [M, K]·[K, N] with weights of `weight_bytes` per element in `dtype`."""
    return gemm_at(n, k, weight_bytes, m_rows, *gemm_rates(sc, dtype))


def gemm_rates(sc: Deployment, dtype: str) -> tuple[float, float, float, float, float]:
    """(datasheet BW, priced BW, peak FLOP/s of `dtype`, per-kernel cost, compute efficiency) for a GEMM here."""
    e = _eff()
    return (float(sc.gpu.hbm_bw_bytes_per_s), achieved_bw_bytes_per_s(sc.gpu) * e.gemm_bw_eff,
            peak_flops(sc.gpu, dtype), _kernel_s(sc), e.compute_eff)


def gemm_at(n: int, k: int, weight_bytes: float, m_rows: Arr, bw: float, bw_priced: float,
            peak: float, kernel_s: float, compute_eff: float) -> tuple[Arr, Arr]:
    """`gemm` with the GPU's rates given (floor at `bw` and `peak`; roof at `bw_priced`, peak · compute_eff, + one
    kernel)."""
    nbytes = n * k * weight_bytes + m_rows * (k + n) * 2.0
    fl = 2.0 * m_rows * n * k
    return np.maximum(nbytes / bw, fl / peak), np.maximum(nbytes / bw_priced, fl / (peak * compute_eff)) + kernel_s


def _pair(sc: Deployment, nbytes: Arr, fl: Arr, kernels: float) -> tuple[Arr, Arr]:
    floor = np.maximum(nbytes / float(sc.gpu.hbm_bw_bytes_per_s), fl / _fast_peak(sc))
    e = _eff()
    roof = np.maximum(nbytes / (achieved_bw_bytes_per_s(sc.gpu) * e.attn_bw_eff),
                      fl / (peak_flops(sc.gpu, "bf16") * e.attn_compute_eff)) + kernels * _kernel_s(sc)
    return np.asarray(floor, dtype=float), np.asarray(roof, dtype=float)


def bounded(curve: Arr, floor: Arr, roof: Arr) -> Arr:
    """The curve held in [floor, MAX_OVER_ROOFLINE · roof] point by point."""
    return np.asarray(np.minimum(np.maximum(curve, floor), MAX_OVER_ROOFLINE * roof), dtype=float)


def over_roofline(curve: Arr, roof: Arr) -> float:
    """The largest curve / roof over the points given (nan: none)."""
    c = np.asarray(curve, dtype=float)
    return float(np.max(c / np.maximum(roof, 1e-15))) if c.size else float("nan")
