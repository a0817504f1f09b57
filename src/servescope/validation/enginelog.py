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

from servescope._paths import read_text
from servescope.errors import ScenarioError

# Linear time in the log (issue 32): each line is searched for fixed keys with str.find, the number after a key is
# the run of [0-9.,] chars within the next MAX_TOKEN characters, and that token must match a strict pattern
# (no nested or unbounded quantifiers: a 400 KB line costs one pass). A key followed by a malformed number
# (`1.2.3`) is refused naming the file, the line and the field.
MAX_TOKEN = 40
MAX_POSITIONS = 64  # per-position acceptance rates on one line (speculative k)
_RUN = re.compile(rf"[0-9.,]{{1,{MAX_TOKEN}}}")
_INT = re.compile(r"\d{1,3}(?:,\d{3}){1,5}|\d{1,15}")  # 449,600 or 1183488
_FLOAT = re.compile(r"\d{1,15}(?:\.\d{1,15})?")
_KV, _CONC_FOR, _CONC_X = "GPU KV cache size: ", "Maximum concurrency for ", " tokens per request: "
_SPEC, _SPEC_MEAN, _SPEC_DRAFTED = "SpecDecoding metrics:", "Mean acceptance length: ", "Drafted: "
_SPEC_RATES, _SPEC_END = "Per-position acceptance rate: ", ", Avg Draft"
_SGL_POOL, _SGL_RUNNING, _SGL_CONTEXT, _SGL_ACCEPT = ("max_total_num_tokens=", "max_running_requests=",
                                                      "context_len=", "accept len: ")


class _Line:
    """One log line and where it is (for messages)."""

    def __init__(self, path: str, no: int, text: str) -> None:
        self.path, self.no, self.text = path, no, text

    def token(self, key: str, start: int = 0) -> tuple[str, int] | None:
        """The number-like run right after `key` (from `start`) and where it ends; None when the key is absent or
        no digit follows it."""
        at = self.text.find(key, start)
        if at < 0:
            return None
        begin = at + len(key)
        m = _RUN.match(self.text, begin)
        tok = m.group(0).rstrip(",") if m else ""
        return (tok, begin + len(tok)) if tok else None

    def bad(self, field_name: str, tok: str, expected: str) -> ScenarioError:
        return ScenarioError(f"{self.path}:{self.no}: field {field_name}: got {tok!r} (expected {expected})")

    def as_int(self, key: str, start: int = 0) -> tuple[int, int] | None:
        found = self.token(key, start)
        if found is None:
            return None
        if not _INT.fullmatch(found[0]):
            raise self.bad(key.strip(" :="), found[0], "a whole number such as 449,600")
        return int(found[0].replace(",", "")), found[1]

    def as_float(self, key: str, start: int = 0) -> tuple[float, int] | None:
        found = self.token(key, start)
        if found is None:
            return None
        if not _FLOAT.fullmatch(found[0]):
            raise self.bad(key.strip(" :="), found[0], "a number such as 2.37")
        return float(found[0]), found[1]

    def shown(self, start: int = 0) -> str:
        text = self.text[start:].strip()
        return text if len(text) <= 300 else text[:297] + "..."


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
    return parse_engine_log(read_text(p, "engine log", ScenarioError, errors="replace"), str(p))


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


def _lines(text: str, path: str, *keys: str) -> list[_Line]:
    """The lines holding any of `keys` (fixed strings), in order."""
    return [_Line(path, no, line) for no, line in enumerate(text.splitlines(), 1) if any(k in line for k in keys)]


def _kv(values: list[int], what: str, path: str) -> tuple[int | None, list[str]]:
    if not values:
        return None, []
    warnings = []
    if len(set(values)) > 1:
        warnings.append(f"{path}: {what} differs between lines ({', '.join(f'{v:,}' for v in sorted(set(values)))}); "
                        "the smallest is used")
    return min(values), warnings


def _vllm(text: str, path: str) -> EngineLog:
    kv_values: list[int] = []
    conc: tuple[int, float] | None = None
    specs: list[tuple[float, int, tuple[float, ...]]] = []
    used: list[str] = []
    for line in _lines(text, path, _KV, _CONC_FOR, _SPEC):
        found = line.as_int(_KV)
        if found is not None:
            kv_values.append(found[0])
            used.append(line.shown(line.text.find(_KV)))
        tokens = line.as_int(_CONC_FOR)
        if tokens is not None and line.text.startswith(_CONC_X, tokens[1]):
            ratio = line.as_float(_CONC_X, tokens[1])
            if ratio is not None:
                conc = conc or (tokens[0], ratio[0])
                used.append(line.shown(line.text.find(_CONC_FOR)))
        spec = _spec_line(line)
        if spec is not None:
            specs.append(spec)
            used.append(line.shown(line.text.find(_SPEC)))
    kv, warnings = _kv(kv_values, "GPU KV cache size", path)
    acceptance, mean_len = _pooled(specs)
    return EngineLog(path, "vllm" if kv is not None or specs else None, kv, conc[0] if conc else None,
                     conc[1] if conc else None, None, acceptance, mean_len, tuple(used[:7]), tuple(warnings))


def _spec_line(line: _Line) -> tuple[float, int, tuple[float, ...]] | None:
    """(mean acceptance length, drafted tokens, per-position rates) of a vLLM SpecDecoding line, None unless the
    line holds all three in order."""
    at = line.text.find(_SPEC)
    if at < 0:
        return None
    mean = line.as_float(_SPEC_MEAN, at)
    drafted = line.as_int(_SPEC_DRAFTED, mean[1]) if mean else None
    if mean is None or drafted is None:
        return None
    begin = line.text.find(_SPEC_RATES, drafted[1])
    end = line.text.find(_SPEC_END, begin)
    if begin < 0 or end < 0:
        return None
    cells = line.text[begin + len(_SPEC_RATES):end].split(",", MAX_POSITIONS)
    if len(cells) > MAX_POSITIONS:
        raise line.bad("Per-position acceptance rate", f"{len(cells)}+ positions", f"at most {MAX_POSITIONS}")
    rates = []
    for cell in (c.strip() for c in cells):
        if not _FLOAT.fullmatch(cell) or float(cell) > 1:
            raise line.bad("Per-position acceptance rate", cell[:MAX_TOKEN], "rates in [0, 1] such as 0.645")
        rates.append(float(cell))
    return mean[0], drafted[0], tuple(rates)


def _pooled(specs: list[tuple[float, int, tuple[float, ...]]]) -> tuple[tuple[float, ...] | None, float | None]:
    """Per-position rates and mean acceptance length over the logged intervals, weighted by drafted tokens."""
    rows = [r for r in specs if r[1] > 0 and r[2]]
    if not rows:
        return None, None
    k = max(len(r[2]) for r in rows)
    rows = [r for r in rows if len(r[2]) == k]
    total = sum(r[1] for r in rows)
    acceptance = tuple(sum(r[1] * r[2][i] for r in rows) / total for i in range(k))
    return acceptance, sum(r[1] * r[0] for r in rows) / total


def _sglang(text: str, path: str) -> EngineLog:
    pools: list[int] = []
    running: tuple[int, int] | None = None
    context: tuple[int, int] | None = None
    accepts: list[float] = []
    used: list[str] = []
    for line in _lines(text, path, _SGL_POOL, _SGL_ACCEPT):
        pool = line.as_int(_SGL_POOL)
        if pool is not None:
            pools.append(pool[0])
            running = running or line.as_int(_SGL_RUNNING)
            context = context or line.as_int(_SGL_CONTEXT)
            if len(used) < 2:
                used.append(line.shown(line.text.find(_SGL_POOL)))
        accept = line.as_float(_SGL_ACCEPT)
        if accept is not None:
            accepts.append(accept[0])
            if len(accepts) <= 3:
                used.append(line.shown(line.text.find(_SGL_ACCEPT)))
    pool_tokens, warnings = _kv(pools, "max_total_num_tokens", path)
    return EngineLog(path, "sglang" if pool_tokens is not None or accepts else None, pool_tokens,
                     context[0] if context else None, None, running[0] if running else None,
                     None, sum(accepts) / len(accepts) if accepts else None, tuple(used), tuple(warnings))
