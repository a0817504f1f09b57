"""What a serving engine printed about itself: KV capacity, concurrency and speculative acceptance, from its log.

Does: read the lines vLLM and SGLang print at start-up and while serving, as their code writes them:
  vLLM  `GPU KV cache size: 449,600 tokens`, `Maximum concurrency for 262,144 tokens per request: 1.71x`
        (vllm/v1/core/kv_cache_utils.py, `logger.info_once`); `SpecDecoding metrics: Mean acceptance length:
        2.75, …, Accepted: N tokens, Drafted: M tokens, Per-position acceptance rate: 0.645, 0.393, 0.240, Avg Draft
        acceptance rate: …%` (vllm/v1/spec_decode/metrics.py `SpecDecodingLogging.log`; mean acceptance length = 1 +
        accepted / drafts, per-position rates unconditional: position i counts only if 0..i were accepted);
  SGLang `max_total_num_tokens=…, chunked_prefill_size=…, max_prefill_tokens=…, max_running_requests=…,
        context_len=…` (python/sglang/srt/managers/scheduler.py, at start-up) and `accept len: 2.37` in the
        decode-batch lines (the same file, `log_decode_stats`).
Several SpecDecoding lines (one per logging interval) are pooled weighted by their drafted tokens; several KV lines
(one per worker) must agree, else the smallest is kept with a warning.
Does not: decide what to do with the numbers (the CLI passes the KV capacity to the simulation and the acceptance
to the planner, and says so in the provenance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from servescope._paths import is_device
from servescope.errors import ScenarioError

_NUM = r"([0-9][0-9,]*)"
_VLLM_KV = re.compile(r"GPU KV cache size: " + _NUM + r" tokens")
_VLLM_CONC = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: ([0-9.]+)x")
_VLLM_SPEC = re.compile(r"SpecDecoding metrics: Mean acceptance length: ([0-9.]+),.*?Drafted: (\d+) tokens, "
                        r"Per-position acceptance rate: ([0-9., ]+?), Avg Draft")
_SGL_POOL = re.compile(r"max_total_num_tokens=(\d+)")
_SGL_RUNNING = re.compile(r"max_running_requests=(\d+)")
_SGL_CONTEXT = re.compile(r"context_len=(\d+)")
_SGL_ACCEPT = re.compile(r"accept len: ([0-9.]+)")


@dataclass(frozen=True)
class EngineLog:
    """What one engine log says (None where it says nothing), and the lines it was read from."""

    path: str
    engine: str | None  # "vllm" | "sglang"
    kv_cache_tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None  # vLLM: sequences of max_model_len tokens the KV cache holds
    max_running_requests: int | None = None  # SGLang
    acceptance: tuple[float, ...] | None = None  # per position (vLLM), pooled over the logged intervals
    mean_acceptance_length: float | None = None  # tokens per verification step, bonus token included
    lines: tuple[str, ...] = ()  # the lines used, as printed
    warnings: tuple[str, ...] = field(default=())

    @property
    def found(self) -> bool:
        return self.kv_cache_tokens is not None or self.mean_acceptance_length is not None


def read_engine_log(path: str | Path) -> EngineLog:
    """Parse a vLLM or SGLang log file. A file with nothing recognisable gives an EngineLog whose `warnings` say
    so (the caller warns and goes on); an unreadable file raises ScenarioError naming it."""
    p = Path(path)
    if is_device(p):
        raise ScenarioError(f"{p}: a device, not an engine log")
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read the engine log ({e.__class__.__name__})") from None
    return parse_engine_log(text, str(p))


def parse_engine_log(text: str, path: str = "<log>") -> EngineLog:
    """The numbers of an engine log's text (see the module docstring for the lines read)."""
    vllm = _vllm(text, path)
    if vllm.found:
        return vllm
    sglang = _sglang(text, path)
    if sglang.found:
        return sglang
    return EngineLog(path, None, warnings=(f"{path}: no vLLM or SGLang KV-cache or acceptance line found; "
                                           "the engine log is ignored",))


def _ints(values: list[str]) -> list[int]:
    return [int(v.replace(",", "")) for v in values]


def _kv(values: list[int], what: str, path: str) -> tuple[int | None, list[str]]:
    if not values:
        return None, []
    warnings = []
    if len(set(values)) > 1:
        warnings.append(f"{path}: {what} differs between lines ({', '.join(f'{v:,}' for v in sorted(set(values)))}); "
                        "the smallest is used")
    return min(values), warnings


def _vllm(text: str, path: str) -> EngineLog:
    kv_lines = _VLLM_KV.findall(text)
    kv, warnings = _kv(_ints(kv_lines), "GPU KV cache size", path)
    conc = _VLLM_CONC.search(text)
    specs = _VLLM_SPEC.findall(text)
    acceptance, mean_len = _pooled(specs)
    used = [m.group(0) for m in (*_VLLM_KV.finditer(text), *_VLLM_CONC.finditer(text))][:4]
    used += [m.group(0) for m in _VLLM_SPEC.finditer(text)][:3]
    return EngineLog(path, "vllm" if kv is not None or specs else None, kv,
                     _ints([conc.group(1)])[0] if conc else None, float(conc.group(2)) if conc else None, None,
                     acceptance, mean_len, tuple(used), tuple(warnings))


def _pooled(specs: list[tuple[str, str, str]]) -> tuple[tuple[float, ...] | None, float | None]:
    """Per-position rates and mean acceptance length over the logged intervals, weighted by drafted tokens."""
    rows = [(float(mean), int(drafted), tuple(float(x) for x in rates.split(",") if x.strip()))
            for mean, drafted, rates in specs]
    rows = [r for r in rows if r[1] > 0 and r[2]]
    if not rows:
        return None, None
    k = max(len(r[2]) for r in rows)
    rows = [r for r in rows if len(r[2]) == k]
    total = sum(r[1] for r in rows)
    acceptance = tuple(sum(r[1] * r[2][i] for r in rows) / total for i in range(k))
    return acceptance, sum(r[1] * r[0] for r in rows) / total


def _sglang(text: str, path: str) -> EngineLog:
    pool, warnings = _kv(_ints(_SGL_POOL.findall(text)), "max_total_num_tokens", path)
    running = _SGL_RUNNING.search(text)
    context = _SGL_CONTEXT.search(text)
    accepts = [float(a) for a in _SGL_ACCEPT.findall(text)]
    used = [m.group(0) for m in _SGL_POOL.finditer(text)][:2] + [m.group(0) for m in _SGL_ACCEPT.finditer(text)][:3]
    return EngineLog(path, "sglang" if pool is not None or accepts else None, pool,
                     int(context.group(1)) if context else None, None, int(running.group(1)) if running else None,
                     None, sum(accepts) / len(accepts) if accepts else None, tuple(used), tuple(warnings))
