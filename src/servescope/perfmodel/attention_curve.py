"""Decode and prefill attention at the measured per-op curves, inside their domains and bounds (measured_ops.py's).

What it does: `decode_attention_curve(sc, b, kv_len)` — seconds of a decode step's attention kernels on one GPU:
Σ over full/sliding GQA layers of `generation_attention`, or over MLA layers of `generation_mla` (the kernel alone),
at b sequences per GPU over kv_len cached tokens (sliding: min(kv_len, window); DSA: min(kv_len, top-k)), each point
held in [floor, 3 × roofline] (curve_bounds.py). `prefill_attention_curve(sc, b, isl)` — the same for a prefill with
no cached prefix (`context_attention` / `context_mla`). None where no table of the scenario's engine answers for its
version and shape, or where the curve runs above 3 × its roofline at the deployment's shapes (refused).
Which engine: the scenario's own; with --op-curves transfer (Efficiency.op_curves = 2) the others in ENGINES order
where it has none, said in `describe_attention`.
FP8 KV rule (a domain rule): with an fp8 KV cache a decode layer costs min(fp8 curve, bf16 curve × roof_fp8 /
roof_bf16) — the bf16-KV curve of the same engine and shape extended along the KV-bytes axis by the roofline's own
scaling; without a bf16 curve, or with the bf16 one refused, there is no fp8 curve either. So the priced KV term
never rises when the KV bytes fall: an fp8 table slower than that is a kernel path outside what the bf16 one prices.
Deployment shapes (the refusal probe): b ∈ curve_bounds.PROBE_BATCH per GPU at the deployment's isl and isl + osl
(decode), b ∈ {1, 4, 16} prompts of isl tokens (prefill).
What it does not: price the KV write or the attention FLOPs the curve leaves out (combine.py), or the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import curve_bounds, opcurve
from servescope.perfmodel.curve_bounds import (
    DOMAIN_OFF,
    MAX_OVER_ROOFLINE,
    PROBE_BATCH,
    bounded,
    family_on,
    over_roofline,
    rows_note,
)
from servescope.specs.engines import ENGINES

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

Arr = np.ndarray
_VERDICTS: dict[tuple[object, ...], tuple[str | None, str]] = {}


def transfer(sc: Deployment) -> bool:
    """Whether --op-curves transfer is on (Efficiency.op_curves = 2): other engines' tables and the nearest version."""
    return float(np.max(sc.efficiency.op_curves)) > 1.5


def kv_dtype(sc: Deployment) -> str:
    """The KV-cache dtype name of the measured tables."""
    return "fp8" if sc.quant.kv.name.startswith("fp8") else "bfloat16"


def engines(sc: Deployment) -> tuple[str, ...]:
    """The engines whose tables may price this scenario: its own; in transfer mode then the others."""
    return (sc.backend, *(e for e in ENGINES if e != sc.backend)) if transfer(sc) else (sc.backend,)


def _mla(sc: Deployment) -> bool:
    return sc.model.attention_kind == "mla" and bool(sc.model.kv_lora_rank)


def _raw(sc: Deployment, engine: str, b: Arr, kv_len: Arr, kv: str, prefill: bool = False) -> Arr | None:
    m, tp, gpu, ver, moved = sc.model, sc.tp, sc.gpu.name, sc.engine_version, transfer(sc)
    if _mla(sc):
        fn = opcurve.mla_context_time_s if prefill else opcurve.mla_decode_time_s
        return fn(gpu, engine, ver, b, kv_len, m.n_heads // tp, kv, moved)
    if m.attention_kind != "gqa":
        return None
    fn2 = opcurve.context_attention_time_s if prefill else opcurve.decode_attention_time_s
    return fn2(gpu, engine, ver, b, kv_len, m.n_heads // tp, max(m.n_kv_heads // tp, 1), m.head_dim, kv,
               transfer=moved)


def _decode_layer(sc: Deployment, engine: str, b: Arr, kv_len: Arr) -> tuple[Arr | None, Arr | None]:
    """(this KV dtype's per-layer time, the bf16-KV curve it is bounded by or None), unbounded (module FP8 rule)."""
    kv = kv_dtype(sc)
    t = _raw(sc, engine, b, kv_len, kv)
    if kv != "fp8":
        return t, None
    t16 = _raw(sc, engine, b, kv_len, "bfloat16")
    if t16 is None:
        return None, None
    _, r8 = curve_bounds.decode_attention(sc, b, kv_len)
    _, r16 = curve_bounds.decode_attention(sc, b, kv_len, kv_bytes=2.0)
    cap = t16 * r8 / r16
    return (cap if t is None else np.minimum(t, cap)), t16


def _probe_lens(sc: Deployment) -> list[float]:
    lens = [float(max(sc.isl, 1))] if sc.decode_only else [float(max(sc.isl, 1)), float(sc.isl + sc.osl)]
    return [min(x, float(sc.model.index_topk)) if sc.model.index_topk else x for x in lens]


def _key(sc: Deployment, what: str) -> tuple[object, ...]:
    m = sc.model
    return (what, sc.gpu.name, sc.backend, sc.engine_version, m.name, m.n_layers, m.n_heads, m.n_kv_heads,
            m.head_dim, sc.tp, sc.quant.kv.name, sc.isl, sc.osl, sc.decode_only, transfer(sc),
            float(np.mean(sc.efficiency.kernel_overhead_s)))  # the roof's per-kernel part (curve_bounds)


def decode_verdict(sc: Deployment) -> tuple[str | None, str]:
    """(the engine whose table prices the decode attention, or None; why not / what was refused, in words)."""
    key = _key(sc, "decode")
    if key not in _VERDICTS:
        _VERDICTS[key] = _judge(sc, False) if family_on(sc, "decode_attention") else (None, _off(sc, "decode_attention"))
    return _VERDICTS[key]


def prefill_verdict(sc: Deployment) -> tuple[str | None, str]:
    """As decode_verdict, for the prefill attention."""
    key = _key(sc, "prefill")
    if key not in _VERDICTS:
        _VERDICTS[key] = _judge(sc, True) if family_on(sc, "prefill_attention") else (None, _off(sc, "prefill_attention"))
    return _VERDICTS[key]


def _off(sc: Deployment, family: str) -> str:
    return f"off in this domain: {DOMAIN_OFF[(sc.gpu.name, sc.backend, family)]}"


def _judge(sc: Deployment, prefill: bool) -> tuple[str | None, str]:
    b, lens = (np.array([1.0, 4.0, 16.0]), [float(max(sc.isl, 1))]) if prefill else (PROBE_BATCH, _probe_lens(sc))
    bb, ll = (x.ravel() for x in np.meshgrid(b, np.array(lens)))
    if not prefill and sc.model.n_attn("sliding"):
        ll = np.concatenate([ll, np.minimum(ll, float(sc.model.sliding_window or 1))])
        bb = np.concatenate([bb, bb])
    refused = ""
    for engine in engines(sc):
        if prefill:
            t, t16 = _raw(sc, engine, bb, ll, kv_dtype(sc), prefill=True), None
            roof = curve_bounds.prefill_attention(sc, bb, ll)[1]
        else:
            t, t16 = _decode_layer(sc, engine, bb, ll)
            roof = curve_bounds.decode_attention(sc, bb, ll)[1]
        if t is None:
            continue
        ratio = over_roofline(t, roof)
        if t16 is not None:  # the bf16 curve the fp8 one is bounded by must hold the bound itself
            ratio = max(ratio, over_roofline(t16, curve_bounds.decode_attention(sc, bb, ll, kv_bytes=2.0)[1]))
        if ratio > MAX_OVER_ROOFLINE:
            refused = refused or (f"the measured {engine} curve runs {ratio:.2f}× its roofline at this deployment's "
                                  f"shapes, above {MAX_OVER_ROOFLINE:g}×: not the serving kernel, refused")
            continue
        return engine, "" if engine == sc.backend else f"transferred from {engine} (--op-curves transfer)"
    return None, refused or "no curve"


def decode_attention_curve(sc: Deployment, b: Arr, kv_len: Arr) -> Arr | None:
    """Seconds of a decode step's attention kernels on one GPU (module docstring); None: the datasheet prices it."""
    m = sc.model
    engine, _ = decode_verdict(sc)
    if engine is None or (not _mla(sc) and m.attention_kind != "gqa"):
        return None
    bb, kv = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (b, kv_len))
    n_full, n_swa = m.n_attn("full"), m.n_attn("sliding")
    if n_full + n_swa == 0:
        return None
    if _mla(sc):
        return _bounded_layer(sc, engine, bb, np.minimum(kv, m.index_topk) if m.index_topk else kv, n_full + n_swa)
    out = _bounded_layer(sc, engine, bb, kv, n_full)
    if out is not None and n_swa:
        swa = _bounded_layer(sc, engine, bb, np.minimum(kv, float(m.sliding_window or 1)), n_swa)
        out = None if swa is None else out + swa
    return out


def _bounded_layer(sc: Deployment, engine: str, b: Arr, kv_len: Arr, layers: int) -> Arr | None:
    if layers == 0:
        return np.zeros(np.broadcast(b, kv_len).shape)
    t, _ = _decode_layer(sc, engine, b, kv_len)
    if t is None:
        return None
    floor, roof = curve_bounds.decode_attention(sc, b, kv_len)
    return layers * bounded(t, floor, roof)


def prefill_attention_curve(sc: Deployment, b: Arr, isl: Arr) -> Arr | None:
    """Seconds of a prefill step's attention kernels on one GPU for b prompts of isl new tokens with no cached prefix
    (module docstring); None for sliding-window, DSA, V4 and recurrent attention (no such curve), or no curve."""
    m = sc.model
    if m.n_attn("sliding") or m.index_topk or not m.n_attn("full"):
        return None
    engine, _ = prefill_verdict(sc)
    if engine is None:
        return None
    bb, n = (np.maximum(np.asarray(x, dtype=float), 1.0) for x in (b, isl))
    t = _raw(sc, engine, bb, n, kv_dtype(sc), prefill=True)
    if t is None:
        return None
    floor, roof = curve_bounds.prefill_attention(sc, bb, n)
    return m.n_attn("full") * bounded(t, floor, roof)


def describe_decode(sc: Deployment) -> str:
    """Where the decode attention's price comes from, after 'decode attention: ' (curve or why the datasheet)."""
    m = sc.model
    engine, why = decode_verdict(sc)
    kv, heads = kv_dtype(sc), m.n_heads // sc.tp
    op = "mla_decode" if _mla(sc) else "decode_attention"
    shape: dict[str, int | str] = {"num_heads": heads, "kv_dtype": kv}
    if not _mla(sc):
        shape.update(kv_heads=max(m.n_kv_heads // sc.tp, 1), head_dim=m.head_dim)
    if engine is None:
        if why == "no curve":
            text = opcurve.describe(op, sc.gpu.name, sc.backend, sc.engine_version, **shape)
            why = text[len("no curve: datasheet ("):-1] if text.startswith("no curve") else (
                f"no {kv} KV curve with a bf16-KV curve beside it for {sc.backend}")
        return f"datasheet roofline × fitted efficiency ({why})"
    text = opcurve.describe(op, sc.gpu.name, engine, sc.engine_version, transfer=transfer(sc),
                            **(shape if kv != "fp8" else {**shape, "kv_dtype": "bfloat16"})).split(", interpolated")[0]
    what = "MLA kernel at the " if _mla(sc) else ""
    fp8 = ("; fp8 KV: min(the fp8-KV curve, this bf16-KV curve × the roofline's fp8/bf16 ratio)" if kv == "fp8"
           else "")
    moved = f" ({why})" if why else ""
    return (f"{what}{text}{moved}{fp8}, held between the KV read at the datasheet bandwidth and "
            f"{MAX_OVER_ROOFLINE:g}× its roofline{rows_note(sc, 'decode_attention')}")
