"""Measured per-op times from aiconfigurator's silicon curves (specs.opcurves), interpolated by shape: pure lookups.

What it does: the measured time in SECONDS of a GEMM, a MoE layer's experts, decode and prefill attention, and MLA
(the attention kernel alone, or DeepSeek-V3's whole MLA block), for one GPU system, engine and engine version,
vectorised over the token / batch / length axes; None when no curve covers the case. `describe` says which curve
(Parquet file in the wheel, framework, version, kernel) answered and how, or why none did ("no curve: datasheet").
The rules, the same for every op:
  GPU      the project's spec name (aliases resolved by specs.hardware.resolve_gpu_name) equal to a system name.
  domain   a table answers only inside its domain (specs.opcurves.OpDomain): its engine, and the versions of its
           version window (the measured release and newer ones of its major.minor series up to the next measured
           version; no version named: the newest table). Outside: no curve, the datasheet, and the reason. Only with
           `transfer` (--op-curves transfer) does the nearest measured version answer for a version outside every
           window, said in the notes; another engine's table is never looked up here (measured_ops decides that,
           in transfer mode only).
  shape    the exact key; else the nearest measured shape of the same dtype, its time scaled by the work ratio the
           op's roofline implies (GEMM N·K; decode attention KV heads; prefill attention and MLA query heads; MoE
           hidden·inter), noted.
  grid     log-log linear between measured points; below the first measured point that point (the small-size
           floor: launch- or weight-read-bound, flat); above the last measured point of an axis, the time at that
           edge × roofline(x) / roofline(edge), the op's datasheet roofline (op_roofline.py) with its fixed parts —
           the curve extends as the op's bytes and FLOPs do, never by the curve's own last slope.
What it does not: open files, fit anything, price collectives, or bound the curves. The curves are what the
benchmark measured: small GEMMs and decode attention whose working set fits in L2 ran L2-resident, faster than
HBM allows (opcurves/README.md); measured_ops.py bounds them by the model's roofline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from servescope.errors import UnknownName
from servescope.perfmodel import op_roofline
from servescope.perfmodel.curve_match import Line, Match, surface
from servescope.perfmodel.op_roofline import Roof
from servescope.specs.hardware import resolve_gpu_name
from servescope.specs.opcurves import OpTable, load_opcurves, opcurve_systems, version_number

Array = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike
# the project's scheme names (specs.quant) → the dtype names of the measured tables
_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "auto": "bfloat16", "fp8-block": "fp8_block",
           "fp8_e4m3": "fp8", "int4-w4a16": "int4_wo", "int4-w4a16-g128": "int4_wo", "mxfp4": "w4a16_mxfp4"}


# --- which system, which table ------------------------------------------------------------------------------------

@lru_cache(maxsize=64)
def _system(gpu: str) -> str | None:
    try:
        name = resolve_gpu_name(gpu)
    except UnknownName:
        return None
    return name if name in opcurve_systems() else None


def _version_value(version: str) -> float:
    v = version_number(version)
    return v[0] * 1e9 + v[1] * 1e6 + v[2] * 1e3 + v[3] + (v[4] * (1.0 - v[5] / 1e3) if v[4] else 0.0)


@lru_cache(maxsize=1024)
def _table(gpu: str, op: str, engine: str, version: str, transfer: bool = False) -> tuple[OpTable | None, str]:
    """The table for (op, engine) whose domain answers for `version` (module rules), and a note, or None and why."""
    system = _system(gpu)
    if system is None:
        return None, f"no measured curves for GPU '{gpu}' (have: {', '.join(opcurve_systems())})"
    found = [t for t in load_opcurves(system, op) if t.op == op and t.engine == engine.lower()]
    if not found:
        return None, f"no {op} curves for {engine} on {system}"
    if not version:  # no version named: the newest engine, as the engine defaults are (specs.engines)
        return max(found, key=lambda t: _version_value(t.version)), ""
    inside = [t for t in found if t.domain.answers(version)]
    if inside:
        return max(inside, key=lambda t: _version_value(t.version)), ""
    windows = "; ".join(t.domain.window() for t in sorted(found, key=lambda t: _version_value(t.version)))
    if not transfer:
        return None, f"{engine} {version} is outside the measured {op} tables' versions ({windows})"
    want = _version_value(version)
    best = min(found, key=lambda t: (abs(_version_value(t.version) - want), -_version_value(t.version)))
    return best, (f"{engine} {version} outside the measured versions ({windows}): {best.version} transferred "
                  "(--op-curves transfer)")


def known_versions(gpu: str, op: str, engine: str) -> tuple[str, ...]:
    """The measured versions of `engine` for `op` on `gpu`, oldest first (empty: none)."""
    system = _system(gpu)
    tables = load_opcurves(system, op) if system else ()
    return tuple(sorted({t.version for t in tables if t.op == op and t.engine == engine.lower()},
                        key=version_number))


def _dtype(name: str) -> str:
    return _DTYPES.get(name.lower(), name.lower())


def _nearest(table: OpTable, want: dict[str, int], same: dict[str, int | str], fixed_ok: Callable[[int], bool],
             ) -> tuple[int, dict[str, int]] | None:
    """The row (with its key) minimising Σ |ln(key/want)| over `want`'s columns among rows equal on `same` and
    passing `fixed_ok`; exact when the distance is 0."""
    best: tuple[float, int, dict[str, int]] | None = None
    cols = table.key
    for r, key in enumerate(table.keys):
        k = dict(zip(cols, key, strict=True))
        if any(k[c] != v for c, v in same.items()) or not fixed_ok(r):
            continue
        d = sum(abs(math.log(int(k[c]) / v)) for c, v in want.items())
        if best is None or d < best[0]:
            best = (d, r, {c: int(k[c]) for c in want})
    return None if best is None else (best[1], best[2])


def _fmt(d: dict[str, int]) -> str:
    return ", ".join(f"{c}={v}" for c, v in d.items())


# --- one matcher per op (cached: a sweep resolves its shape once) -------------------------------------------------

def _no_curve(why: str) -> str:
    return f"no curve: datasheet ({why})"


def _notes(version_note: str, *more: str) -> tuple[str, ...]:
    return tuple(n for n in (version_note, *more) if n)


@lru_cache(maxsize=4096)
def _match_gemm(gpu: str, engine: str, version: str, dtype: str, n: int, k: int, transfer: bool = False,
                ) -> Match | str:
    table, vnote = _table(gpu, "gemm", engine, version, transfer)
    if table is None:
        return _no_curve(vnote)
    if n <= 0 or k <= 0:
        return _no_curve(f"GEMM N={n}, K={k} is not a shape")
    dt, best = _dtype(dtype), None
    for r, key in enumerate(table.keys):
        kv = dict(zip(table.key, key, strict=True))
        if kv["gemm_dtype"] != dt:
            continue
        n0 = int(kv["n"])
        for i, k0 in enumerate(table.grids[0]):
            if np.isfinite(table.time_s[r, i]).any():
                d = abs(math.log(n / n0)) + abs(math.log(k / int(k0)))
                if best is None or d < best[0]:
                    best = (d, r, i, n0, int(k0))
    if best is None:
        return _no_curve(f"no {dt} GEMM measured for {engine} {table.version} on {table.system}")
    d, r, i, n0, k0 = best
    scale = n * k / (n0 * k0)
    shape = "" if d == 0 else f"(N, K) = ({n}, {k}) not measured: ({n0}, {k0}) × N·K ratio {scale:.3g}"
    return surface(table, r, (i,), op_roofline.gemm(table.system, n, k, dt), scale,
                    _notes(vnote, shape)) or _no_curve("empty curve")


@lru_cache(maxsize=4096)
def _match_moe(gpu: str, engine: str, version: str, dtype: str, hidden: int, inter: int, topk: int,
               experts: int, tp: int = 1, ep: int = 1, distribution: str = "balanced", transfer: bool = False,
               ) -> Match | str:
    table, vnote = _table(gpu, "moe", engine, version, transfer)
    if table is None:
        return _no_curve(vnote)
    grids = dict(zip(table.axes, table.grids, strict=True))
    if tp > 1 and ep > 1:
        return _no_curve(f"MoE moe_tp={tp} with moe_ep={ep}: only pure TP or pure EP shardings are in the data")
    if tp not in grids["moe_tp_size"] or ep not in grids["moe_ep_size"] or distribution not in grids["distribution"]:
        return _no_curve(f"MoE moe_tp={tp}, moe_ep={ep}, {distribution} not in the measured grid "
                         f"(tp {list(grids['moe_tp_size'])}, ep {list(grids['moe_ep_size'])}, "
                         f"{', '.join(map(str, grids['distribution']))})")
    fixed = (grids["moe_tp_size"].index(tp), grids["moe_ep_size"].index(ep), grids["distribution"].index(distribution))
    if hidden <= 0 or inter <= 0:
        return _no_curve(f"MoE hidden={hidden}, inter={inter} is not a shape")
    hit = _nearest(table, {"hidden_size": hidden, "inter_size": inter},
                   {"moe_dtype": _dtype(dtype), "topk": topk, "num_experts": experts},
                   lambda r: bool(np.isfinite(table.time_s[(r, *fixed)]).any()))
    if hit is None:
        return _no_curve(f"no {_dtype(dtype)} MoE with topk {topk} of {experts} experts at moe_tp={tp}, "
                         f"moe_ep={ep}, {distribution} for {engine} {table.version} on {table.system}")
    r, got = hit
    scale = hidden * inter / (got["hidden_size"] * got["inter_size"])
    shape = "" if got == {"hidden_size": hidden, "inter_size": inter} else (
        f"hidden {hidden}, inter {inter} not measured: {_fmt(got)} × hidden·inter ratio {scale:.3g}")
    roof = op_roofline.moe(table.system, hidden, inter, topk, experts, tp, ep, _dtype(dtype))
    return surface(table, r, fixed, roof, scale, _notes(vnote, shape)) or _no_curve("empty curve")


def _match_heads(op: str, gpu: str, engine: str, version: str, same: dict[str, int | str], want: dict[str, int],
                 scale_col: str, roof: Callable[[str], Roof], exact_only: bool = False, transfer: bool = False,
                 ) -> Match | str:
    """Attention-like ops: curve over (batch, length); nearest heads, time scaled by the ratio of `scale_col`;
    `roof(system)` the roofline of the wanted shape."""
    table, vnote = _table(gpu, op, engine, version, transfer)
    if table is None:
        return _no_curve(vnote)
    if min(want.values()) <= 0:
        return _no_curve(f"{op} {_fmt(want)} is not a shape")
    hit = _nearest(table, want, same, lambda r: True)
    if hit is None or (exact_only and hit[1] != want):
        return _no_curve(f"no {op} curve with {', '.join(f'{c}={v}' for c, v in {**same, **want}.items())} "
                         f"for {engine} {table.version} on {table.system}")
    r, got = hit
    scale = want[scale_col] / got[scale_col]
    shape = "" if got == want else f"{_fmt(want)} not measured: {_fmt(got)} × {scale_col} ratio {scale:.3g}"
    return surface(table, r, (), roof(table.system), scale, _notes(vnote, shape)) or _no_curve("empty curve")


@lru_cache(maxsize=4096)
def _match_decode_attention(gpu: str, engine: str, version: str, num_heads: int, kv_heads: int, head_dim: int,
                            kv_dtype: str = "bfloat16", transfer: bool = False) -> Match | str:
    kv = _dtype(kv_dtype)
    return _match_heads("generation_attention", gpu, engine, version, {"kv_cache_dtype": kv, "head_dim": head_dim},
                        {"num_key_value_heads": kv_heads, "num_heads": num_heads}, "num_key_value_heads",
                        lambda s: op_roofline.decode_attention(s, num_heads, kv_heads, head_dim, kv),
                        transfer=transfer)


@lru_cache(maxsize=4096)
def _match_context_attention(gpu: str, engine: str, version: str, num_heads: int, kv_heads: int, head_dim: int,
                             kv_dtype: str = "bfloat16", attn_dtype: str = "bfloat16", transfer: bool = False,
                             ) -> Match | str:
    return _match_heads("context_attention", gpu, engine, version,
                        {"attn_dtype": _dtype(attn_dtype), "kv_cache_dtype": _dtype(kv_dtype), "head_dim": head_dim},
                        {"num_heads": num_heads, "num_key_value_heads": kv_heads}, "num_heads",
                        lambda s: op_roofline.context_attention(s, num_heads, kv_heads, head_dim), transfer=transfer)


@lru_cache(maxsize=4096)
def _match_mla(gpu: str, engine: str, version: str, phase: str, num_heads: int, kv_dtype: str = "bfloat16",
               transfer: bool = False) -> Match | str:
    kv = _dtype(kv_dtype)
    return _match_heads(f"{phase}_mla", gpu, engine, version, {"mla_dtype": "bfloat16", "kv_cache_dtype": kv},
                        {"num_heads": num_heads}, "num_heads", lambda s: op_roofline.mla(s, phase, num_heads, kv),
                        transfer=transfer)


@lru_cache(maxsize=4096)
def _match_mla_module(gpu: str, engine: str, version: str, phase: str, num_heads: int, kv_dtype: str = "bfloat16",
                      gemm_dtype: str = "bfloat16", model: str = "deepseek-ai/DeepSeek-V3",
                      mla_dtype: str = "bfloat16", transfer: bool = False) -> Match | str:
    kv, gd = _dtype(kv_dtype), _dtype(gemm_dtype)
    return _match_heads(f"{phase}_mla_module", gpu, engine, version,
                        {"model": model, "mla_dtype": _dtype(mla_dtype), "kv_cache_dtype": kv, "gemm_type": gd},
                        {"num_heads": num_heads}, "num_heads",
                        lambda s: op_roofline.mla(s, phase, num_heads, kv, module=True, gemm_dtype=gd),
                        exact_only=True, transfer=transfer)


# --- the lookups (transfer: --op-curves transfer, the nearest measured version outside every window, noted) -----

def gemm_time_s(gpu: str, engine: str, version: str, dtype: str, m: ArrayLike, n: int, k: int,
                transfer: bool = False) -> Array | None:
    """Measured time (s) of C[m,n] = A[m,k]·B[k,n] in `dtype` (bfloat16, fp8, fp8_block, nvfp4, ...), per M.
    Log-log in M on the nearest measured (N, K), × N·K/(N0·K0) when not exact; the roofline's ratio beyond."""
    hit = _match_gemm(gpu, engine, version, dtype, int(n), int(k), transfer)
    return None if isinstance(hit, str) else hit.time_s(m)


def monotone_gemm_match(gpu: str, engine: str, version: str, dtype: str, n: int, k: int,
                        transfer: bool = False) -> Match | None:
    """`gemm_time_s`'s curve with the measured points' running maximum in M first (more rows never cost less: a dip
    of the measured time at a larger M is a tile choice the smaller M could not make, or noise); None: no curve.
    A Match, for callers that evaluate it many times."""
    hit = _monotone_gemm(gpu, engine, version, dtype, int(n), int(k), transfer)
    return None if isinstance(hit, str) else hit


@lru_cache(maxsize=4096)
def _monotone_gemm(gpu: str, engine: str, version: str, dtype: str, n: int, k: int, transfer: bool) -> Match | str:
    return _monotone(_match_gemm(gpu, engine, version, dtype, n, k, transfer))


def _monotone(hit: Match | str) -> Match | str:
    """The curve with its measured points' running maximum along the inner axis (more rows or tokens never cost
    less: a measured dip is a tile or kernel choice the smaller size could not make, or noise)."""
    if isinstance(hit, str):
        return hit
    lines = tuple(Line(ln.lx, np.maximum.accumulate(ln.ly), ln.a) for ln in hit.lines)
    return Match(hit.table, hit.row, lines, hit.la, hit.roof, hit.scale, hit.notes)


def moe_time_s(gpu: str, engine: str, version: str, dtype: str, tokens: ArrayLike, hidden: int, inter: int,
               topk: int, experts: int, tp: int = 1, ep: int = 1, distribution: str = "balanced",
               transfer: bool = False) -> Array | None:
    """Measured time (s) of one MoE layer's routed experts on one GPU (grouped GEMMs, no all-to-all) at `tokens`
    tokens per step, moe_tp/moe_ep as the engine shards them and the expert load (balanced or power_law_1.01).
    Log-log in tokens, monotone (running maximum), the roofline's ratio beyond; nearest hidden·inter of the same
    topk/experts, scaled."""
    hit = _monotone_moe(gpu, engine, version, dtype, int(hidden), int(inter), int(topk), int(experts), int(tp), int(ep),
                        distribution, transfer)
    return None if isinstance(hit, str) else hit.time_s(tokens)


@lru_cache(maxsize=4096)
def _monotone_moe(*key: int | str | bool) -> Match | str:
    return _monotone(_match_moe(*key))  # type: ignore[arg-type]


def decode_attention_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, kv_len: ArrayLike,
                            num_heads: int, kv_heads: int, head_dim: int, kv_dtype: str = "bfloat16",
                            transfer: bool = False) -> Array | None:
    """Measured time (s) of one layer's decode attention: `batch` sequences of one new token over `kv_len` cached
    tokens, per-GPU heads. Log-log in batch and kv_len, the roofline's ratio beyond; other heads × KV-head ratio."""
    hit = _match_decode_attention(gpu, engine, version, int(num_heads), int(kv_heads), int(head_dim), kv_dtype,
                                  transfer)
    return None if isinstance(hit, str) else hit.time_s(kv_len, batch)


def context_attention_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, isl: ArrayLike,
                             num_heads: int, kv_heads: int, head_dim: int, kv_dtype: str = "bfloat16",
                             attn_dtype: str = "bfloat16", transfer: bool = False) -> Array | None:
    """Measured time (s) of one layer's prefill attention: `batch` prompts of `isl` new tokens each, no cached
    prefix, per-GPU heads. Log-log in batch and isl, the roofline's ratio beyond; other heads × query-head ratio."""
    hit = _match_context_attention(gpu, engine, version, int(num_heads), int(kv_heads), int(head_dim), kv_dtype,
                                   attn_dtype, transfer)
    return None if isinstance(hit, str) else hit.time_s(isl, batch)


def mla_decode_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, kv_len: ArrayLike, num_heads: int,
                      kv_dtype: str = "bfloat16", transfer: bool = False) -> Array | None:
    """Measured time (s) of the MLA decode attention kernel alone (DeepSeek-V3 latent dims: kv_lora 512 + rope 64),
    per-GPU heads, one layer; log-log in batch and kv_len, the roofline's ratio beyond; other heads × head ratio.
    sglang, trtllm."""
    hit = _match_mla(gpu, engine, version, "generation", int(num_heads), kv_dtype, transfer)
    return None if isinstance(hit, str) else hit.time_s(kv_len, batch)


def mla_context_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, isl: ArrayLike, num_heads: int,
                       kv_dtype: str = "bfloat16", transfer: bool = False) -> Array | None:
    """Measured time (s) of the MLA prefill attention kernel alone, `batch` prompts of `isl` tokens, per-GPU heads;
    log-log in batch and isl, the roofline's ratio beyond; other heads × head ratio. sglang, trtllm."""
    hit = _match_mla(gpu, engine, version, "context", int(num_heads), kv_dtype, transfer)
    return None if isinstance(hit, str) else hit.time_s(isl, batch)


def mla_module_decode_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, kv_len: ArrayLike,
                             num_heads: int, kv_dtype: str = "bfloat16", gemm_dtype: str = "bfloat16",
                             model: str = "deepseek-ai/DeepSeek-V3") -> Array | None:
    """Measured time (s) of one decode MLA block of `model` (its q/kv down and up projections, attention, o_proj
    in `gemm_dtype`), per-GPU heads measured exactly (no scaling), one layer; log-log in batch, kv_len."""
    hit = _match_mla_module(gpu, engine, version, "generation", int(num_heads), kv_dtype, gemm_dtype, model)
    return None if isinstance(hit, str) else hit.time_s(kv_len, batch)


def mla_module_context_time_s(gpu: str, engine: str, version: str, batch: ArrayLike, isl: ArrayLike,
                              num_heads: int, kv_dtype: str = "bfloat16", gemm_dtype: str = "bfloat16",
                              model: str = "deepseek-ai/DeepSeek-V3", mla_dtype: str = "bfloat16") -> Array | None:
    """Measured time (s) of one prefill MLA block of `model` (projections, attention, o_proj in `gemm_dtype`) for
    `batch` prompts of `isl` tokens, per-GPU heads measured exactly; log-log, the roofline's ratio beyond."""
    hit = _match_mla_module(gpu, engine, version, "context", int(num_heads), kv_dtype, gemm_dtype, model, mla_dtype)
    return None if isinstance(hit, str) else hit.time_s(isl, batch)


_MATCHERS: dict[str, Callable[..., Match | str]] = {
    "gemm": _match_gemm, "moe": _match_moe, "decode_attention": _match_decode_attention,
    "context_attention": _match_context_attention,
    "mla_decode": lambda *a, **kw: _match_mla(*a[:3], "generation", *a[3:], **kw),
    "mla_context": lambda *a, **kw: _match_mla(*a[:3], "context", *a[3:], **kw),
    "mla_module_decode": lambda *a, **kw: _match_mla_module(*a[:3], "generation", *a[3:], **kw),
    "mla_module_context": lambda *a, **kw: _match_mla_module(*a[:3], "context", *a[3:], **kw),
}
OPS = tuple(_MATCHERS)


def describe(op: str, gpu: str, engine: str, version: str, **shape: int | str) -> str:
    """Provenance of a lookup: "measured curve <file> (<framework> <version>, kernel <k>; ...), interpolated ..."
    or "no curve: datasheet (<why>)". `op` is one of OPS; `shape` the lookup's scalar arguments by name."""
    if op not in _MATCHERS:
        raise ValueError(f"unknown op '{op}'; known: {', '.join(OPS)}")
    hit = _MATCHERS[op](gpu, engine, version, **shape)
    return hit if isinstance(hit, str) else hit.describe()
