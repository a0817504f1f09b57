"""Where the step model prices a kernel class from a measured per-op curve instead of the datasheet roofline.

What it does: `moe_layer_s(sc, tokens)` — the routed experts of one MoE layer on one GPU, measured by
aiconfigurator-core on this GPU with this engine (opcurve.py; nearest measured engine version, shape scaled by
hidden·inter): time at the step's tokens, with the expert loads of the scenario's routing (skewed → the
power_law_1.01 rows, AIC-MOE-PL in specs/data/routing.toml; uniform → balanced). Used as measured, no fitted
efficiency on top, where its domain answers and curve_bounds.DOMAIN_OFF does not switch it off (on B200 with SGLang
the dev rows' cross-validated error is far worse with it: bench/curve_domains.py, bench/RESULTS.md); Efficiency.
moe_curve = 0 or --op-curves off turn it off everywhere. None where no curve covers the case
(GPU, engine, dtype, experts/top-k, moe_tp/ep), a measured routing histogram, or curves turned off: the roofline
× fitted efficiency prices it then, and `describe` says which.
`dense_gemm_curve(sc, gemms, m, m_sampled)` — the dense GEMMs of a step (gemm_shapes.py) at aiconfigurator's
measured GEMM curve of this GPU and engine, each at M = the step's tokens on this GPU (lm_head: the sampled ones) and
never below its floor (weight read at the datasheet bandwidth, FLOPs at the peak: a curve measured on one L2-resident
buffer can beat HBM; a served step reads every layer's own weights); GEMMs whose dtype has no curve are left to the
roofline.
`decode_attention_curve(sc, b, kv_len)` — the decode attention kernels of every full/sliding GQA layer
(generation_attention) or MLA layer (generation_mla: the kernel alone), at b sequences per GPU over kv_len cached
tokens; `prefill_attention_curve` the prefill ones (context_attention / context_mla) without a cached prefix.
Domains (specs.opcurves.OpDomain, opcurve.py): only the scenario's own engine's tables, at a version its window
answers for; no other engine's table stands in (vLLM has no MLA kernel table: its MLA attention is the datasheet's),
except with `--op-curves transfer` (Efficiency.op_curves = 2), where the other engines' tables and the nearest
measured version answer, said in the provenance.
Bounds (curve_bounds.py): every curve time is held in [its shape's physical floor, MAX_CURVE_OVER_ROOFLINE × its
roofline] point by point, and a curve above MAX_CURVE_OVER_ROOFLINE × its roofline at the deployment's own shapes
(batch 1–512 per GPU at its isl and isl + osl; GEMM M up to 8192; MoE tokens 1–512) is not the engine's serving kernel
— a reference or fallback path (aiconfigurator measures those too: `moe_torch_flow` MXFP4 on B200 at 4–7× the
roofline, vLLM's fp8-block GEMMs on B200 at 6–23× bf16) — and is refused for the deployment: the roofline × fitted
efficiency prices that class, and `describe*` says so.
FP8 KV (a domain rule): an fp8-KV decode attention table answers only where the same engine's bf16-KV table of the
shape answers (and is not refused), and every point is min(fp8 curve, bf16 curve × roof_fp8 / roof_bf16) — the bf16
curve extended along the KV-bytes axis by the roofline's own scaling, as beyond any other measured edge. An fp8 curve
slower than that is a kernel path outside what the bf16 one prices (SGLang's and TRT-LLM's fp8 MLA tables run up to
40× the bf16 ones); with it the priced KV term never rises when the KV bytes halve.
What it does not: price the all-to-all (step.py) or prefill attention (roofline).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import curve_bounds, opcurve
from servescope.perfmodel.attention_curve import (
    decode_attention_curve as decode_attention_curve,  # step.py's
)
from servescope.perfmodel.attention_curve import describe_decode, transfer
from servescope.perfmodel.attention_curve import prefill_attention_curve as prefill_attention_curve
from servescope.perfmodel.curve_bounds import (
    ATTENTION_KERNELS_PER_LAYER as ATTENTION_KERNELS_PER_LAYER,
)
from servescope.perfmodel.curve_bounds import (
    DOMAIN_OFF,
    MAX_OVER_ROOFLINE,
    bounded,
    family_on,
    over_roofline,
    rows_note,
)
from servescope.perfmodel.curve_match import Match
from servescope.perfmodel.efficiency import has_op_curves
from servescope.perfmodel.ep_balance import busiest_touched
from servescope.perfmodel.gemm_shapes import Gemm
from servescope.perfmodel.ops import achieved_bw_bytes_per_s, peak_flops
from servescope.specs.opcurves import opcurve_systems

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

MAX_CURVE_OVER_ROOFLINE = MAX_OVER_ROOFLINE
PROBE_TOKENS = np.array([1.0, 8.0, 64.0, 512.0])
_SERVING_PROBE = PROBE_TOKENS[:3]
_GEMM_PROBE = np.array([1.0, 4.0, 16.0, 64.0, 256.0, 512.0, 2048.0, 8192.0])
# Kernels a measured MoE curve prices per layer (routing, grouped GEMMs, activation, finalize): "moe 8" in the same
# trace's mlp_classes_per_layer.
MOE_KERNELS_PER_LAYER = 8.0


def _distribution(sc: Deployment) -> str | None:
    return {"skewed": "power_law_1.01", "uniform": "balanced"}.get(sc.routing.kind)


def moe_layer_s(sc: Deployment, tokens: np.ndarray) -> np.ndarray | None:
    """Seconds of one MoE layer's routed experts on one GPU at `tokens` tokens in the step (module docstring), held
    in [floor, 3 × roofline] (moe_bounds); the caller refuses a reference path first (curve_over_roofline above
    MAX_CURVE_OVER_ROOFLINE; step.py)."""
    t = _moe_raw(sc, tokens)
    if t is None:
        return None
    floor, roof = moe_bounds(sc, np.maximum(np.asarray(tokens, dtype=float), 1.0))
    return bounded(t, floor, roof)


def _moe_raw(sc: Deployment, tokens: np.ndarray) -> np.ndarray | None:
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers or dist is None or not family_on(sc, "moe"):
        return None
    t = opcurve.moe_time_s(sc.gpu.name, sc.backend, sc.engine_version, sc.quant.experts.name,
                           np.maximum(np.asarray(tokens, dtype=float), 1.0), m.hidden_size, m.moe_intermediate_size,
                           m.top_k, m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist,
                           transfer=transfer(sc))
    return None if t is None or not np.all(np.isfinite(t)) else np.asarray(t, dtype=float)


def moe_bounds(sc: Deployment, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(floor, roof) in seconds of one MoE layer's routed experts on one GPU for `tokens` routed tokens (all ranks):
    bytes = touched experts on the busiest GPU (ep_balance, the scenario's routing) × one expert's bytes on it, FLOPs
    per GPU = tokens · 2 · top_k · expert params / (tp · dp); floor at the datasheet BW and the experts' dtype peak,
    roof at the achieved BW and that peak — step.py's layer roofline for the refusal (at 100 %, no kernel term:
    stricter than the other classes' priced roofline)."""
    m, q = sc.model, sc.quant.experts
    busiest = busiest_touched(sc.routing, m.model_type, m.n_routed_experts, m.top_k, sc.ep, tokens)
    nbytes = busiest * (m.params.per_expert / sc.moe_tp * q.bytes_per_param)
    comp = tokens * 2.0 * m.top_k * m.params.per_expert / (sc.tp * sc.dp) / peak_flops(sc.gpu, q.gemm_dtype)
    return (np.maximum(nbytes / float(sc.gpu.hbm_bw_bytes_per_s), comp),
            np.maximum(nbytes / achieved_bw_bytes_per_s(sc.gpu), comp))


def curve_over_roofline(sc: Deployment, roofline_s: np.ndarray) -> float:
    """The largest ratio over `PROBE_TOKENS` of the measured expert curve to its layer's roofline (nan: no curve)."""
    probe = _moe_raw(sc, PROBE_TOKENS)
    if probe is None:
        return float("nan")
    return over_roofline(probe, np.asarray(roofline_s, dtype=float))


@dataclass(frozen=True)
class DenseCurve:
    """The measured part of a step's dense GEMMs: their time (s, per point), which GEMMs it covers, their kernels."""

    time_s: np.ndarray
    covered: tuple[Gemm, ...]
    kernels: float


def dense_gemm_curve(sc: Deployment, gemms: tuple[Gemm, ...], m: np.ndarray, m_sampled: np.ndarray,
                     peak_bw_bytes_per_s: float) -> DenseCurve:
    """Σ over the listed GEMMs with a serving curve of count × the curve at M held in [floor, 3 × roofline]
    (curve_bounds.gemm), M = m tokens per GPU (m_sampled for lm_head); GEMMs without one are not in `covered`."""
    total = np.zeros(np.broadcast(m, m_sampled).shape)
    plan = _plan(sc, gemms)
    for g, hit, _ in plan:
        rows = np.maximum(m_sampled if g.sampled_only else m, 1.0)
        floor, roof = curve_bounds.gemm(sc, g.n, g.k, g.weights.bytes_per_param, g.weights.gemm_dtype, rows)
        total = total + g.count * bounded(hit.time_s(rows), floor, roof)
    return DenseCurve(total, tuple(g for g, _, _ in plan), float(sum(g.count for g, _, _ in plan)))


def _plan(sc: Deployment, gemms: tuple[Gemm, ...]) -> tuple[tuple[Gemm, Match, float], ...]:
    if not family_on(sc, "gemm"):
        return ()
    rates = tuple((d, curve_bounds.gemm_rates(sc, d)) for d in sorted({g.weights.gemm_dtype for g in gemms}))
    return _gemm_plan(sc.gpu.name, sc.backend, sc.engine_version, gemms, float(sc.gpu.hbm_bw_bytes_per_s),
                      transfer(sc), rates)


@lru_cache(maxsize=1024)
def _gemm_plan(gpu: str, engine: str, version: str, gemms: tuple[Gemm, ...], bw: float, moved: bool,
               rates: tuple[tuple[str, tuple[float, float, float, float, float]], ...],
               ) -> tuple[tuple[Gemm, Match, float], ...]:
    """The listed GEMMs a serving curve covers, with their (monotone) curve and largest ratio to the roofline over
    _GEMM_PROBE (`rates`: curve_bounds.gemm_rates per dtype): resolved once."""
    by_dtype: dict[str, tuple[float, float, float, float, float]] = dict(rates)
    out = []
    for g in gemms:
        hit = opcurve.monotone_gemm_match(gpu, engine, version, g.weights.name, g.n, g.k, moved)
        if hit is None or not _serving(gpu, engine, version, g, bw, moved):
            continue
        t = hit.time_s(_GEMM_PROBE)
        if not np.all(np.isfinite(t)):
            continue
        _, roof = curve_bounds.gemm_at(g.n, g.k, g.weights.bytes_per_param, _GEMM_PROBE, *by_dtype[g.weights.gemm_dtype])
        if over_roofline(t, roof) <= MAX_OVER_ROOFLINE:
            out.append((g, hit, over_roofline(t, roof)))
    return tuple(out)


def _refused_gemms(sc: Deployment, gemms: tuple[Gemm, ...]) -> list[tuple[str, float]]:
    """The GEMMs whose serving curve runs above MAX_OVER_ROOFLINE × their roofline (name, ratio)."""
    out = []
    for g in gemms:
        hit = opcurve.monotone_gemm_match(sc.gpu.name, sc.backend, sc.engine_version, g.weights.name, g.n, g.k,
                                          transfer(sc))
        if hit is None:
            continue
        _, roof = curve_bounds.gemm(sc, g.n, g.k, g.weights.bytes_per_param, g.weights.gemm_dtype, _GEMM_PROBE)
        r = over_roofline(hit.time_s(_GEMM_PROBE), roof)
        if r > MAX_OVER_ROOFLINE:
            out.append((g.name, r))
    return out


def serving_gemm(sc: Deployment, g: Gemm) -> bool:
    """False where a weight-quantized GEMM's curve is not the engine's serving kernel, judged against the same
    engine's bf16 GEMM of the same shape at decode sizes (median over M = 1, 8, 64): slower than bf16 where the bf16
    kernel is bandwidth-bound (its weight read at the datasheet BW ≥ half its time: reading fewer bytes must be
    faster), or more than MAX_CURVE_OVER_ROOFLINE × bf16 anywhere (fixed costs of scaled kernels do not explain
    that): a fallback path — e.g. vLLM's fp8-block GEMMs on B200, 6–23× its bf16 ones. True for 16-bit weights and
    where no bf16 curve exists to compare."""
    return _serving(sc.gpu.name, sc.backend, sc.engine_version, g, float(sc.gpu.hbm_bw_bytes_per_s), transfer(sc))


@lru_cache(maxsize=4096)
def _serving(gpu: str, engine: str, version: str, g: Gemm, bw: float, moved: bool = False) -> bool:
    if g.weights.bytes_per_param >= 2.0:
        return True
    n, k, probe = g.n, g.k, _SERVING_PROBE
    quant = opcurve.gemm_time_s(gpu, engine, version, g.weights.name, probe, n, k, moved)
    bf16 = opcurve.gemm_time_s(gpu, engine, version, "bf16", probe, n, k, moved)
    if quant is None or bf16 is None:
        return True
    slower = float(np.median(quant / bf16))
    bandwidth_bound = 2.0 * n * k / bw >= 0.5 * float(np.median(bf16))
    return slower <= MAX_CURVE_OVER_ROOFLINE and not (bandwidth_bound and slower > 1.0)


def describe(sc: Deployment, over_roofline: float = float("nan")) -> str:
    """Provenance of the routed-expert time, in words; `over_roofline` = curve_over_roofline (step.py)."""
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers:
        return ""
    if dist is None:
        return "routed experts: roofline × fitted efficiency (a measured routing histogram has no per-op curve)"
    text = opcurve.describe("moe", sc.gpu.name, sc.backend, sc.engine_version, dtype=sc.quant.experts.name,
                            hidden=m.hidden_size, inter=m.moe_intermediate_size, topk=m.top_k,
                            experts=m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist,
                            transfer=transfer(sc))
    if text.startswith("no curve"):
        return f"routed experts: datasheet roofline × fitted efficiency ({text})"
    if not family_on(sc, "moe"):
        return f"routed experts: datasheet roofline × fitted efficiency (off in this domain, {_off(sc, 'moe')}; {text})"
    if over_roofline > MAX_CURVE_OVER_ROOFLINE:
        return (f"routed experts: datasheet roofline × fitted efficiency (the measured curve runs {over_roofline:.2f}× "
                f"its roofline, above {MAX_CURVE_OVER_ROOFLINE:g}×: a reference path, not the serving kernel; {text})")
    if sc.efficiency.moe_curve < 0.5 or float(np.max(sc.efficiency.op_curves)) <= 0.5:
        return f"routed experts: datasheet roofline × fitted efficiency (measured per-op curves turned off; {text})"
    return f"routed experts: {text}{rows_note(sc, 'moe')}"


def describe_dense(sc: Deployment, gemms: tuple[Gemm, ...]) -> str:
    """Provenance of the dense GEMM time: which GEMMs a measured curve prices (and from where), which the datasheet."""
    if not has_op_curves(sc.gpu.name):
        return f"dense GEMMs: datasheet roofline × fitted efficiency ({_no_curves(sc)})"
    if float(np.max(sc.efficiency.op_curves)) <= 0.5:
        return "dense GEMMs: datasheet roofline × fitted efficiency (measured per-op curves turned off)"
    if not family_on(sc, "gemm"):
        return f"dense GEMMs: datasheet roofline × fitted efficiency (off in this domain, {_off(sc, 'gemm')})"
    curved = [g for g, _, _ in _plan(sc, gemms)]
    rest = [g for g in gemms if g not in curved]
    refused = _refused_gemms(sc, tuple(rest))
    over = (f"; {', '.join(f'{n} {r:.1f}×' for n, r in refused)} its roofline, above {MAX_OVER_ROOFLINE:g}×: "
            "refused") if refused else ""
    moved = transfer(sc)
    if not curved:
        g = gemms[0]
        why = opcurve.describe("gemm", sc.gpu.name, sc.backend, sc.engine_version, dtype=g.weights.name, n=g.n, k=g.k,
                               transfer=moved)
        if why.startswith("measured"):
            why = "the weight-quantized curve runs slower than bf16, or above 3× its roofline: a fallback path"
        return f"dense GEMMs: datasheet roofline × fitted efficiency ({why}{over})"
    g = curved[0]
    src = opcurve.describe("gemm", sc.gpu.name, sc.backend, sc.engine_version, dtype=g.weights.name, n=g.n, k=g.k,
                           transfer=moved)
    head, _, how = src.partition(", interpolated log-log")
    src = head + (f" ({how.removeprefix('; ')})" if moved and "transferred" in how else "")
    out = (f"dense GEMMs: {', '.join(x.name for x in curved)} at the {src}, each held between its floor (weight read "
           f"at the datasheet bandwidth, FLOPs at the peak) and {MAX_OVER_ROOFLINE:g}× its roofline"
           f"{rows_note(sc, 'gemm')}")
    if rest:
        out += (f"; datasheet roofline × fitted efficiency for {', '.join(x.name for x in rest)} (no serving curve"
                f"{over})")
    return out


def describe_attention(sc: Deployment, measured: bool) -> str:
    """Provenance of the decode attention time (`measured`: a curve prices it, step.measured_attention)."""
    if not has_op_curves(sc.gpu.name):
        return f"decode attention: datasheet roofline × fitted efficiency ({_no_curves(sc)})"
    if float(np.max(sc.efficiency.op_curves)) <= 0.5:
        return "decode attention: datasheet roofline × fitted efficiency (measured per-op curves turned off)"
    return f"decode attention: {describe_decode(sc)}"


def _off(sc: Deployment, family: str) -> str:
    return DOMAIN_OFF[(sc.gpu.name, sc.backend, family)]


def _no_curves(sc: Deployment) -> str:
    return (f"no measured per-op curves for GPU '{sc.gpu.name}' (have: {', '.join(opcurve_systems())}); "
            "the roofline fit prices it, efficiency.toml [roofline]")
