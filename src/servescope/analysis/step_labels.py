"""Step labels: what a serving step's CPU-side annotation says about the step (`parse_step_label`).

Does: parse vLLM `execute_context_…_generation_…` (plain, and detailed with per-request length sums), the Aug 2025
`execute_new_N_cached_M`, SGLang `step[EXTEND|DECODE|MIXED…]`, ATOM `prefill[…]`/`decode[…]` and `ProfilerStep#N`
into a StepLabel (kind, batch size, tokens, source, length sums); `LABEL_PREFIX` is the pattern a label name starts
with.
Does not: find labels in a trace or attribute GPU events to steps (analysis.steps, which re-exports StepLabel and
parse_step_label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# vLLM upstream: execute_context_{nCtxReq}({ctxTok})_generation_{nGenReq}({genTok}); the b200 trace writes
# ctxTok as "{tok}_{Σ sq·sk}" and the detailed form prefixes the total token count and adds sq/sk sums.
_VLLM = re.compile(
    r"^execute_(?:(?P<total>\d+)_)?context_(?P<nctx>\d+)\((?P<ctxinfo>[^)]*)\)"
    r"_generation_(?P<ngen>\d+)\((?P<geninfo>[^)]*)\)"
)
# vLLM PR #22496 (about Aug 2025, gpu_worker.annotate_profile): execute_new_{scheduled new requests}_cached_{scheduled
# cached requests}: request counts only, no token counts (docs/capture.md, reference capture-and-formats.md §1.5).
# The detailed part's sums (vllm/config/profiler.py `detailed_trace_annotation`: "roofline metrics (sk, sqsq, sqsk)").
_LENGTHS = re.compile(r"sq(?P<sq>\d+)sk(?P<sk>\d+)sqsq(?P<sqsq>\d+)sqsk(?P<sqsk>\d+)")
_VLLM_NEW_CACHED = re.compile(r"^execute_new_(?P<new>\d+)_cached_(?P<cached>\d+)$")
_SGLANG = re.compile(r"^step\[(?P<mode>EXTEND|DECODE|MIXED|PREFILL|IDLE)(?P<rest>[^\]]*)\]")
_ATOM = re.compile(r"^(?P<mode>prefill|decode)\[(?P<rest>[^\]]*)\]")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(?P<n>\d+)$")
# What every label regex above starts with (Polars regex syntax), to pick candidates without a Python loop.
LABEL_PREFIX = r"^(?:execute_|step\[|prefill\[|decode\[|ProfilerStep#)"
_KV_INT = re.compile(r"(?P<key>bs|toks|tok)=(?P<val>\d+)")


@dataclass(frozen=True)
class StepLabel:
    """What a step annotation says about its step. `lengths`: (Σ sq, Σ sk, Σ sq², Σ sq·sk) over all its requests
    (query tokens scheduled, KV length) when the label carries them (vLLM `detailed_trace_annotation`, PR #37524:
    `…context_N(sq…sk…sqsq…sqsk…)_generation_N(sq…sk…sqsq…sqsk…)`), else None."""

    kind: str  # prefill | decode | mixed | unknown
    batch_size: int | None
    tokens: int | None
    source: str  # vllm | sglang | atom | profiler_step
    lengths: tuple[int, int, int, int] | None = None


def _leading_int(text: str) -> int | None:
    match = re.match(r"(?:sq)?(\d+)", text)
    return int(match.group(1)) if match else None


def _kind(n_prefill: int, n_decode: int) -> str:
    if n_prefill and n_decode:
        return "mixed"
    if n_prefill:
        return "prefill"
    return "decode" if n_decode else "unknown"


def _lengths(info: str) -> tuple[int, int, int, int] | None:
    """(Σ sq, Σ sk, Σ sq², Σ sq·sk) of a detailed label part `sq…sk…sqsq…sqsk…`, else None."""
    m = _LENGTHS.fullmatch(info)
    return (int(m["sq"]), int(m["sk"]), int(m["sqsq"]), int(m["sqsk"])) if m else None


def _parse_vllm(m: re.Match[str]) -> StepLabel:
    n_ctx, n_gen = int(m["nctx"]), int(m["ngen"])
    ctx_tokens = _leading_int(m["ctxinfo"]) or 0
    gen_tokens = _leading_int(m["geninfo"]) or 0
    tokens = int(m["total"]) if m["total"] else ctx_tokens + gen_tokens
    ctx, gen = _lengths(m["ctxinfo"]), _lengths(m["geninfo"])
    both = tuple(a + b for a, b in zip(ctx, gen, strict=True)) if ctx and gen else None
    return StepLabel(_kind(n_ctx, n_gen), n_ctx + n_gen, tokens, "vllm", both)  # type: ignore[arg-type]


def _parse_vllm_new_cached(m: re.Match[str]) -> StepLabel:
    """New requests run their first prefill chunk; cached ones are already running: decoding, or a chunked
    prefill's later chunk, which this label cannot tell apart — a cached-only step is read as decode. The label
    carries no token counts; the batch is all scheduled requests."""
    n_new, n_cached = int(m["new"]), int(m["cached"])
    return StepLabel(_kind(n_new, n_cached), n_new + n_cached or None, None, "vllm")


def _ints(rest: str) -> dict[str, int]:
    return {g["key"]: int(g["val"]) for g in _KV_INT.finditer(rest)}


def _parse_sglang(m: re.Match[str]) -> StepLabel:
    kind = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}.get(
        m["mode"], "unknown"
    )
    values = _ints(m["rest"])
    batch = values.get("bs")
    tokens = values.get("toks", batch if kind == "decode" else None)
    return StepLabel(kind, batch, tokens, "sglang")


def _parse_atom(m: re.Match[str]) -> StepLabel:
    # ATOM shows padding as bs=117/128: the first number is the real batch.
    values = _ints(m["rest"])
    kind = "prefill" if m["mode"] == "prefill" else "decode"
    batch = values.get("bs")
    return StepLabel(kind, batch, values.get("tok", batch if kind == "decode" else None), "atom")


def parse_step_label(name: str) -> StepLabel | None:
    """Return what a step annotation says, or None when `name` is not a step label."""
    if m := _VLLM.match(name):
        return _parse_vllm(m)
    if m := _VLLM_NEW_CACHED.match(name):
        return _parse_vllm_new_cached(m)
    if m := _SGLANG.match(name):
        return _parse_sglang(m)
    if m := _ATOM.match(name):
        return _parse_atom(m)
    if _PROFILER_STEP.match(name):
        return StepLabel("unknown", None, None, "profiler_step")
    return None
