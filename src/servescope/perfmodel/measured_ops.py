"""Where the step model prices a kernel class from a measured per-op curve instead of the datasheet roofline.

What it does: `moe_layer_s(sc, tokens)` — the routed experts of one MoE layer on one GPU, measured by
aiconfigurator-core on this GPU with this engine (opcurve.py; nearest measured engine version, shape scaled by
hidden·inter): time at the step's tokens, with the expert loads of the scenario's routing (skewed → the
power_law_1.01 rows, AIC-MOE-PL in specs/data/routing.toml; uniform → balanced). Used as measured, no fitted
efficiency on top, when Efficiency.moe_curve = 1; off in the shipped defaults: on the dev rows it is no better
cross-validated (leave one model out TPOT 20.7 % → 20.9 %, bench/ablate_issue18.py). None where no curve covers the case
(GPU, engine, dtype, experts/top-k, moe_tp/ep), a measured routing histogram, or curves turned off: the roofline
× fitted efficiency prices it then, and `describe` says which.
`dense_gemm_curve(sc, gemms, m, m_sampled)` — the dense GEMMs of a step (gemm_shapes.py) at aiconfigurator's
measured GEMM curve of this GPU and engine, each at M = the step's tokens on this GPU (lm_head: the sampled ones) and
never below its weight read at the datasheet bandwidth (a curve measured on one L2-resident buffer can beat HBM;
a served step reads every layer's own weights); GEMMs whose dtype has no curve are left to the roofline.
`decode_attention_curve(sc, b, kv_len)` — the decode attention kernels of every full/sliding GQA layer
(generation_attention) or MLA layer (generation_mla: the kernel alone; an engine without its own MLA table takes
another engine's on the same GPU, said), at b sequences per GPU over kv_len cached tokens.
Routed experts: a curve more than `MAX_CURVE_OVER_ROOFLINE` × the roofline of the same layer at 100 % of the
achieved bandwidth and peak (median over 1–512 tokens) is not the engine's serving kernel (aiconfigurator also
measures reference paths; e.g. `moe_torch_flow` MXFP4 on B200 runs 4–7× the roofline where the served gpt-oss
steps imply ≤ 1.3×) and is not used: the roofline × fitted efficiency prices those experts, and `describe` says so.
What it does not: price the all-to-all (step.py) or prefill attention (roofline).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import opcurve
from servescope.perfmodel.efficiency import has_op_curves
from servescope.perfmodel.gemm_shapes import Gemm
from servescope.specs.opcurves import opcurve_systems

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

# A measured expert curve above this multiple of its own layer's roofline (at 100 % of the achieved bandwidth and
# of the peak) is taken for a reference path, not the serving kernel (module docstring). The measured curves sit at
# 0.9–1.6× (median per scenario over the dev rows' MoE layers); the reference paths at 4–7.3×; 3 lies in the gap.
MAX_CURVE_OVER_ROOFLINE = 3.0
PROBE_TOKENS = np.array([1.0, 8.0, 64.0, 512.0])
# Engines whose kernel tables stand in, in this order, where the scenario's engine has none for an op on this GPU.
_ENGINES = ("sglang", "trtllm", "vllm")
# Attention kernels per decode layer a measured attention curve prices (the rest of the layer's kernels stay in
# the per-kernel overhead): 2.5, counted in vLLM's FULL-graph decode trace (specs/data/kernel_counts.toml
# [trace.vllm_graph_decode] attention_classes_per_layer "attention 2.5": unified attention 2d/3d + reduce).
ATTENTION_KERNELS_PER_LAYER = 2.5
# Kernels a measured MoE curve prices per layer (routing, grouped GEMMs, activation, finalize): "moe 8" in the same
# trace's mlp_classes_per_layer.
MOE_KERNELS_PER_LAYER = 8.0


def _distribution(sc: Deployment) -> str | None:
    return {"skewed": "power_law_1.01", "uniform": "balanced"}.get(sc.routing.kind)


def moe_layer_s(sc: Deployment, tokens: np.ndarray) -> np.ndarray | None:
    """Seconds of one MoE layer's routed experts on one GPU at `tokens` tokens in the step (module docstring); the
    caller refuses a reference path first (curve_over_roofline above MAX_CURVE_OVER_ROOFLINE; step.py)."""
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers or dist is None:
        return None
    t = opcurve.moe_time_s(sc.gpu.name, sc.backend, sc.engine_version, sc.quant.experts.name,
                           np.maximum(np.asarray(tokens, dtype=float), 1.0), m.hidden_size, m.moe_intermediate_size,
                           m.top_k, m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist)
    return None if t is None or not np.all(np.isfinite(t)) else np.asarray(t, dtype=float)


def curve_over_roofline(sc: Deployment, roofline_s: np.ndarray) -> float:
    """Median over `PROBE_TOKENS` of the measured expert curve over its layer's roofline (nan: no curve)."""
    probe = moe_layer_s(sc, PROBE_TOKENS)
    if probe is None:
        return float("nan")
    return float(np.median(probe / np.maximum(np.asarray(roofline_s, dtype=float), 1e-12)))


@dataclass(frozen=True)
class DenseCurve:
    """The measured part of a step's dense GEMMs: their time (s, per point), which GEMMs it covers, their kernels."""

    time_s: np.ndarray
    covered: tuple[Gemm, ...]
    kernels: float


def dense_gemm_curve(sc: Deployment, gemms: tuple[Gemm, ...], m: np.ndarray, m_sampled: np.ndarray,
                     peak_bw_bytes_per_s: float) -> DenseCurve:
    """Σ over the listed GEMMs with a measured curve of count × max(curve(M), N·K·bytes/param / datasheet BW),
    M = m tokens per GPU (m_sampled for lm_head); GEMMs without a curve are not in `covered`."""
    total = np.zeros(np.broadcast(m, m_sampled).shape)
    plan = _gemm_plan(sc.gpu.name, sc.backend, sc.engine_version, gemms, float(sc.gpu.hbm_bw_bytes_per_s),
                      peak_bw_bytes_per_s)
    for g, hit, read_s in plan:
        rows = np.maximum(m_sampled if g.sampled_only else m, 1.0)
        total = total + g.count * np.maximum(hit.time_s(rows), read_s)
    return DenseCurve(total, tuple(g for g, _, _ in plan), float(sum(g.count for g, _, _ in plan)))


@lru_cache(maxsize=1024)
def _gemm_plan(gpu: str, engine: str, version: str, gemms: tuple[Gemm, ...], bw: float,
               peak_bw: float) -> tuple[tuple[Gemm, opcurve.Match, float], ...]:
    """The listed GEMMs a serving curve covers, with their (monotone) curve and weight read time: resolved once."""
    out = []
    for g in gemms:
        hit = opcurve.monotone_gemm_match(gpu, engine, version, g.weights.name, g.n, g.k)
        if hit is None or not _serving(gpu, engine, version, g, bw) or not np.all(np.isfinite(hit.time_s(PROBE_TOKENS))):
            continue
        out.append((g, hit, g.params * g.weights.bytes_per_param / peak_bw))
    return tuple(out)


def serving_gemm(sc: Deployment, g: Gemm) -> bool:
    """False where a weight-quantized GEMM's curve is not the engine's serving kernel, judged against the same
    engine's bf16 GEMM of the same shape at decode sizes (median over M = 1, 8, 64): slower than bf16 where the bf16
    kernel is bandwidth-bound (its weight read at the datasheet BW ≥ half its time: reading fewer bytes must be
    faster), or more than MAX_CURVE_OVER_ROOFLINE × bf16 anywhere (fixed costs of scaled kernels do not explain
    that): a fallback path — e.g. vLLM's fp8-block GEMMs on B200, 6–23× its bf16 ones. True for 16-bit weights and
    where no bf16 curve exists to compare."""
    return _serving(sc.gpu.name, sc.backend, sc.engine_version, g, float(sc.gpu.hbm_bw_bytes_per_s))


@lru_cache(maxsize=4096)
def _serving(gpu: str, engine: str, version: str, g: Gemm, bw: float) -> bool:
    if g.weights.bytes_per_param >= 2.0:
        return True
    n, k, probe = g.n, g.k, PROBE_TOKENS[:3]
    quant = opcurve.gemm_time_s(gpu, engine, version, g.weights.name, probe, n, k)
    bf16 = opcurve.gemm_time_s(gpu, engine, version, "bf16", probe, n, k)
    if quant is None or bf16 is None:
        return True
    slower = float(np.median(quant / bf16))
    bandwidth_bound = 2.0 * n * k / bw >= 0.5 * float(np.median(bf16))
    return slower <= MAX_CURVE_OVER_ROOFLINE and not (bandwidth_bound and slower > 1.0)


def _kv_dtype(sc: Deployment) -> str:
    return "fp8" if sc.quant.kv.name.startswith("fp8") else "bfloat16"


def _engines(sc: Deployment) -> tuple[str, ...]:
    """The scenario's engine, then the others whose kernel tables stand in for a table it lacks on this GPU."""
    return (sc.backend, *(e for e in _ENGINES if e != sc.backend))


def _mla_decode(sc: Deployment, b: np.ndarray, kv_len: np.ndarray) -> np.ndarray | None:
    m = sc.model
    for engine in _engines(sc):
        t = opcurve.mla_decode_time_s(sc.gpu.name, engine, sc.engine_version, b, kv_len, m.n_heads // sc.tp,
                                      _kv_dtype(sc))
        if t is not None:
            return t
    return None


def decode_attention_curve(sc: Deployment, b: np.ndarray, kv_len: np.ndarray) -> np.ndarray | None:
    """Seconds of a decode step's attention kernels on one GPU: Σ over full/sliding layers of the measured
    per-layer time at b sequences per GPU over kv_len cached tokens (sliding: min(kv_len, window); DSA: min(kv_len,
    top-k)); None where a layer kind or shape has no curve (V4 and linear layers are priced elsewhere)."""
    m, tp = sc.model, sc.tp
    bb, kv = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (b, kv_len))
    n_full, n_swa = m.n_attn("full"), m.n_attn("sliding")
    if m.attention_kind == "mla" and m.kv_lora_rank:
        t = _mla_decode(sc, bb, np.minimum(kv, m.index_topk) if m.index_topk else kv)
        return None if t is None else (n_full + n_swa) * t
    if m.attention_kind != "gqa" or n_full + n_swa == 0:
        return None
    q_heads, kv_heads = m.n_heads // tp, max(m.n_kv_heads // tp, 1)
    full = opcurve.decode_attention_time_s(sc.gpu.name, sc.backend, sc.engine_version, bb, kv, q_heads, kv_heads,
                                           m.head_dim, _kv_dtype(sc))
    if full is None:
        return None
    out = n_full * full
    if n_swa:
        swa = opcurve.decode_attention_time_s(sc.gpu.name, sc.backend, sc.engine_version, bb,
                                              np.minimum(kv, float(m.sliding_window or 1)), q_heads, kv_heads,
                                              m.head_dim, _kv_dtype(sc))
        if swa is None:
            return None
        out = out + n_swa * swa
    return np.asarray(out, dtype=float)


def describe(sc: Deployment, over_roofline: float = float("nan")) -> str:
    """Provenance of the routed-expert time, in words; `over_roofline` = curve_over_roofline (step.py)."""
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers:
        return ""
    if dist is None:
        return "routed experts: roofline × fitted efficiency (a measured routing histogram has no per-op curve)"
    text = opcurve.describe("moe", sc.gpu.name, sc.backend, sc.engine_version, dtype=sc.quant.experts.name,
                            hidden=m.hidden_size, inter=m.moe_intermediate_size, topk=m.top_k,
                            experts=m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist)
    if text.startswith("no curve"):
        return f"routed experts: datasheet roofline × fitted efficiency ({text})"
    if over_roofline > MAX_CURVE_OVER_ROOFLINE:
        return (f"routed experts: datasheet roofline × fitted efficiency (the measured curve runs {over_roofline:.1f}× "
                f"its roofline, above {MAX_CURVE_OVER_ROOFLINE:g}×: a reference path, not the serving kernel; {text})")
    if sc.efficiency.moe_curve < 0.5:
        return ("routed experts: datasheet roofline × fitted efficiency (a measured curve exists but is off by "
                f"default: Efficiency.moe_curve; {text})")
    return f"routed experts: {text}"


def describe_dense(sc: Deployment, gemms: tuple[Gemm, ...]) -> str:
    """Provenance of the dense GEMM time: which GEMMs a measured curve prices (and from where), which the datasheet."""
    if not has_op_curves(sc.gpu.name):
        return f"dense GEMMs: datasheet roofline × fitted efficiency ({_no_curves(sc)})"
    if sc.efficiency.op_curves <= 0.5:
        return "dense GEMMs: datasheet roofline × fitted efficiency (measured per-op curves turned off)"
    plan = _gemm_plan(sc.gpu.name, sc.backend, sc.engine_version, gemms, float(sc.gpu.hbm_bw_bytes_per_s),
                      float(sc.gpu.hbm_bw_bytes_per_s))
    curved = [g for g, _, _ in plan]
    rest = [g for g in gemms if g not in curved]
    if not curved:
        g = gemms[0]
        why = opcurve.describe("gemm", sc.gpu.name, sc.backend, sc.engine_version, dtype=g.weights.name, n=g.n, k=g.k)
        if why.startswith("measured"):
            why = "the weight-quantized curve runs slower than bf16: a fallback path"
        return f"dense GEMMs: datasheet roofline × fitted efficiency ({why})"
    g = curved[0]
    src = opcurve.describe("gemm", sc.gpu.name, sc.backend, sc.engine_version, dtype=g.weights.name, n=g.n, k=g.k)
    src = src.split(", interpolated")[0]
    out = f"dense GEMMs: {', '.join(x.name for x in curved)} at the {src}, each ≥ its read at the datasheet bandwidth"
    if rest:
        out += f"; datasheet roofline × fitted efficiency for {', '.join(x.name for x in rest)} (no serving curve)"
    return out


def describe_attention(sc: Deployment, measured: bool) -> str:
    """Provenance of the decode attention time (`measured`: a curve prices it, step.measured_attention)."""
    if not has_op_curves(sc.gpu.name):
        return f"decode attention: datasheet roofline × fitted efficiency ({_no_curves(sc)})"
    if sc.efficiency.op_curves <= 0.5:
        return "decode attention: datasheet roofline × fitted efficiency (measured per-op curves turned off)"
    m = sc.model
    if not measured:
        return ("decode attention: datasheet roofline × fitted efficiency (no measured curve for "
                f"{m.attention_kind.upper()} attention with head_dim {m.head_dim}, KV {_kv_dtype(sc)} on {sc.gpu.name}"
                f" with {sc.backend})")
    if m.attention_kind == "mla":
        for engine in _engines(sc):
            text = opcurve.describe("mla_decode", sc.gpu.name, engine, sc.engine_version,
                                    num_heads=m.n_heads // sc.tp, kv_dtype=_kv_dtype(sc))
            if text.startswith("measured"):
                moved = "" if engine == sc.backend else f" (transferred from {engine}: {sc.backend} has no MLA kernel table)"
                return f"decode attention: MLA kernel at the {text.split(', interpolated')[0]}{moved}"
    text = opcurve.describe("decode_attention", sc.gpu.name, sc.backend, sc.engine_version,
                            num_heads=m.n_heads // sc.tp, kv_heads=max(m.n_kv_heads // sc.tp, 1),
                            head_dim=m.head_dim, kv_dtype=_kv_dtype(sc))
    return f"decode attention: {text.split(', interpolated')[0]}, ≥ the KV read at the datasheet bandwidth"


def _no_curves(sc: Deployment) -> str:
    return (f"no measured per-op curves for GPU '{sc.gpu.name}' (have: {', '.join(opcurve_systems())}); "
            "the roofline fit prices it, efficiency.toml [roofline]")


def prefill_attention_curve(sc: Deployment, b: np.ndarray, isl: np.ndarray) -> np.ndarray | None:
    """Seconds of a prefill step's attention kernels on one GPU for b prompts of isl new tokens with no cached prefix:
    Σ over full-attention GQA layers of the measured `context_attention` time, or over MLA layers of the
    kernel-alone `context_mla` time (another engine's table on the same GPU where this one has none); None for
    sliding-window, DSA, V4 and recurrent attention (no such curve) — the roofline prices those."""
    m, tp = sc.model, sc.tp
    bb, n = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (b, isl))
    if m.n_attn("sliding") or m.index_topk or not m.n_attn("full"):
        return None
    if m.attention_kind == "mla" and m.kv_lora_rank:
        for engine in _engines(sc):
            t = opcurve.mla_context_time_s(sc.gpu.name, engine, sc.engine_version, bb, n, m.n_heads // tp,
                                           _kv_dtype(sc))
            if t is not None:
                return m.n_attn("full") * t
        return None
    if m.attention_kind != "gqa":
        return None
    t = opcurve.context_attention_time_s(sc.gpu.name, sc.backend, sc.engine_version, bb, n, m.n_heads // tp,
                                         max(m.n_kv_heads // tp, 1), m.head_dim, _kv_dtype(sc))
    return None if t is None else m.n_attn("full") * t
