"""Measured benchmark results as input: `vllm bench serve --save-result` JSON and `sglang.bench_serving` JSONL.

What it does: takes a decoded file (one JSON object, or JSON lines: one run per line; servescope.validation.benchio reads
and decodes it, since the model imports no JSON codec), tells the two tools apart by
their keys (SGLang writes `*_e2e_latency_ms` / `dataset_name`, vLLM `*_e2el_ms` / `endpoint_type` / `date`),
and returns per run the client settings (requests, request rate, max concurrency, mean and configured lengths)
and every metric it holds under one naming: `ttft_ms.mean|p50|p90|p99`, `tpot_ms.*`, `itl_ms.*`, `e2e_ms.*`,
`output_tok_s`, `request_throughput_per_s`, `duration_s`. Key lists: FORMAT.md in
shared/validation/bench_serve_samples (vLLM vllm/benchmarks/serve.py, SGLang python/sglang/bench_serving.py).
A run missing a key a comparison needs raises BenchFileError naming the keys; metrics are optional one by one
(the December-2024 SGLang schema has no TPOT and no p99).
What it does not: simulate (simulate; `bench_workload` only turns a run's client settings into a
workload) or judge (`compare` only pairs numbers up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servescope._paths import finite_number, read_text
from servescope.errors import ScenarioError
from servescope.simulate.workload import Arrival, Workload, build_workload, draw_lengths

REQUIRED = ("completed", "duration", "total_input_tokens", "total_output_tokens")
# What a run says about the deployment it measured: vLLM's model_id (the served model) and client backend, SGLang's
# backend, and the layout keys `vllm bench serve --metadata KEY=VALUE` adds when given (FORMAT.md).
IDENTITY_KEYS = ("model_id", "model", "backend", "tensor_parallel_size", "tp", "tp_size", "pipeline_parallel_size",
                 "pp", "data_parallel_size", "dp", "num_gpus", "gpus")
STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
# metric -> the key stem each tool writes (f"{stat}_{stem}_ms")
STEMS = {"vllm": {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"},
         "sglang": {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2e_latency"}}


class BenchFileError(ScenarioError):
    """A benchmark result file that cannot be read or lacks keys a comparison needs."""


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run: client settings and measured metrics (ms, tok/s, req/s, s)."""

    path: str
    line: int  # 1-based line of a JSONL file (1 for a JSON file)
    tool: str  # "vllm" | "sglang"
    completed: int
    request_rate_per_s: float  # math.inf: all sent at once
    max_concurrency: int | None
    mean_isl: float
    mean_osl: float
    isl: int | None  # configured random lengths and range ratio, when the file has them (random dataset)
    osl: int | None
    range_ratio: float | None
    metrics: dict[str, float]
    # per-request lengths of a detailed result (vLLM --save-detailed `input_lens` / `output_lens`), when present
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # what the run says it measured (IDENTITY_KEYS present in the file, as text): calibrate.inputs checks them
    identity: tuple[tuple[str, str], ...] = ()

    def label(self) -> str:
        rate = "inf" if math.isinf(self.request_rate_per_s) else f"{self.request_rate_per_s:g}"
        cap = f", max concurrency {self.max_concurrency}" if self.max_concurrency else ""
        return f"{Path(self.path).name}:{self.line} ({self.tool}, rate {rate}{cap}, {self.completed} requests)"


# Keys only one tool writes (shared/validation/bench_serve_samples/FORMAT.md); `dataset_name`, `backend`,
# `request_rate`, `duration`, the ttft/tpot/itl stats are written by both and decide nothing.
_VLLM_ONLY = frozenset({"date", "endpoint_type", "num_prompts", "burstiness", "request_goodput", "model_id",
                        "tokenizer_id", "label", "input_lens", "output_lens", "ttfts", "itls", "start_times",
                        "generated_texts", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"})
_SGLANG_ONLY = frozenset({"total_output_tokens_retokenized", "sharegpt_output_len", "fixed_output_len",
                          "random_input_len", "random_output_len", "random_range_ratio", "accept_length",
                          "total_throughput"})


def _tool(d: dict[str, object]) -> str:
    """Which benchmark wrote a result: the one whose own keys it carries most (a vLLM file may carry
    `dataset_name` too); E2E latency is `*_e2el_ms` in vLLM and `*_e2e_latency_ms` in SGLang."""
    keys = set(d)
    vllm = len(keys & _VLLM_ONLY) + sum(k.endswith("_e2el_ms") or k.startswith("spec_decode_") for k in keys)
    sglang = len(keys & _SGLANG_ONLY) + sum(k.endswith("_e2e_latency_ms") for k in keys)
    return "sglang" if sglang > vllm else "vllm"


def _num(d: dict[str, object], key: str) -> float | None:
    v = d.get(key)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    return None


def _metrics(d: dict[str, object], tool: str) -> dict[str, float]:
    m: dict[str, float] = {}
    for name, stem in STEMS[tool].items():
        for stat, out in STATS.items():
            v = _num(d, f"{stat}_{stem}_ms")
            if v is not None and math.isfinite(v):  # NaN / inf: a statistic the tool could not compute
                m[f"{name}.{out}"] = v
    for key, out in (("output_throughput", "output_tok_s"), ("request_throughput", "request_throughput_per_s"),
                     ("duration", "duration_s")):
        v = _num(d, key)
        if v is not None and math.isfinite(v):
            m[out] = v
    return m


MAX_REQUESTS = 10**6  # requests and concurrency of a run: simulate's --num-prompts ceiling (cli MAX_PROMPTS)
MAX_TOKENS = 10**7  # a request's prompt or output length (configured or mean): the longest context window (10 M)


def _bounded(d: dict[str, object], key: str, path: str, line: int, low: float, high: float,
             integer: bool = False) -> float | None:
    """The number under `key` (None when absent), refused unless finite, in [low, high] and (integer) whole."""
    v = _num(d, key)
    return None if v is None else finite_number(v, path, key, BenchFileError, line=line, low=low, high=high,
                                                integer=integer)


def parse_run(d: dict[str, object], path: str, line: int) -> BenchRun:
    missing = [k for k in REQUIRED if _num(d, k) is None]
    if missing:
        raise BenchFileError(f"{path}:{line}: missing keys {', '.join(missing)} (benchmark result files carry "
                             f"{', '.join(REQUIRED)}; see docs/simulate.md)")
    tool = _tool(d)
    done = int(_bounded(d, "completed", path, line, 0, MAX_REQUESTS, integer=True) or 0)
    if done < 1:
        raise BenchFileError(f"{path}:{line}: completed = {done}: no finished requests to compare")
    _bounded(d, "duration", path, line, 0, 1e9)
    tokens = {k: _bounded(d, k, path, line, 0, MAX_TOKENS * done) or 0.0
              for k in ("total_input_tokens", "total_output_tokens")}
    rate = _num(d, "request_rate")
    if rate is not None and not (rate > 0):  # NaN, 0 or negative: no arrival process (inf: all at once)
        raise BenchFileError(f"{path}:{line}: field request_rate: got {rate!r} (expected a positive rate in "
                             "requests/s, or inf)")
    cap = _num(d, "max_concurrency")
    cap = None if cap is None or cap == math.inf else _bounded(d, "max_concurrency", path, line, 0, MAX_REQUESTS,
                                                               integer=True)
    ratio = _bounded(d, "random_range_ratio", path, line, 0, 1)
    isl = _bounded(d, "random_input_len", path, line, 0, MAX_TOKENS, integer=True)
    osl = _bounded(d, "random_output_len", path, line, 0, MAX_TOKENS, integer=True)
    if d.get("dataset_name") not in (None, "random"):  # e.g. sharegpt: the random-length keys are unused
        isl = osl = ratio = None
    return BenchRun(
        path=path, line=line, tool=tool, completed=done, request_rate_per_s=math.inf if rate is None else rate,
        max_concurrency=int(cap) if cap else None,
        mean_isl=tokens["total_input_tokens"] / done, mean_osl=tokens["total_output_tokens"] / done,
        isl=int(isl) if isl else None, osl=int(osl) if osl else None, range_ratio=ratio,
        metrics=_metrics(d, tool), lengths=_request_lengths(d),
        identity=tuple((k, str(d[k])) for k in IDENTITY_KEYS
                       if isinstance(d.get(k), str | int | float) and not isinstance(d.get(k), bool)),
    )


def _request_lengths(d: dict[str, object]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input, output) tokens per request of a detailed result; None unless both lists hold positive integers
    of one length."""
    ins, outs = d.get("input_lens"), d.get("output_lens")
    if not isinstance(ins, list) or not isinstance(outs, list) or not ins or len(ins) != len(outs):
        return None
    if not all(type(x) is int and 0 < x <= MAX_TOKENS for x in (*ins, *outs)):
        return None
    return tuple(ins), tuple(outs)


def read_runs(objects: list[tuple[int, dict[str, object]]], path: str) -> list[BenchRun]:
    """Every run of a decoded result file: (line, object) pairs (servescope.validation.benchio decodes the JSON)."""
    if not objects:
        raise BenchFileError(f"{path}: no benchmark runs in the file")
    return [parse_run(d, path, no) for no, d in objects]


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    measured: float
    simulated: float

    @property
    def error_frac(self) -> float:
        """(simulated − measured) / measured."""
        return (self.simulated - self.measured) / self.measured if self.measured else math.nan


def compare(run: BenchRun, simulated: dict[str, float]) -> list[MetricComparison]:
    """Pairs of every metric both the file and the simulation have, in the file's order."""
    return [MetricComparison(k, v, simulated[k]) for k, v in run.metrics.items() if k in simulated]


def bench_workload(run: BenchRun, seed: int = 0) -> Workload:
    """The client load a measured run applied, as a simulation workload: its request count, arrival (request
    rate inf + max concurrency c = closed loop at c; inf without a cap = a burst; a finite rate = Poisson,
    capped when the file has a max concurrency) and lengths (each request's own when the file is a detailed
    result, else the configured random lengths and range ratio when the file has them, else every request at the
    file's mean lengths)."""
    if math.isinf(run.request_rate_per_s):
        arrival = Arrival("closed") if run.max_concurrency else Arrival("burst", burst=run.completed)
    else:
        arrival = Arrival("poisson", rate_per_s=run.request_rate_per_s)
    if run.lengths is not None:
        isl, osl = (np.asarray(v, dtype=np.int64) for v in run.lengths)
    elif run.isl and run.osl:
        ratio = 1.0 if run.range_ratio is None else run.range_ratio
        isl, osl = draw_lengths(run.completed, run.isl, run.osl, ratio, seed)
    else:
        isl = np.full(1, max(1, round(run.mean_isl)), dtype=np.int64)
        osl = np.full(1, max(1, round(run.mean_osl)), dtype=np.int64)
    return build_workload(arrival, run.completed, run.max_concurrency, isl, osl, seed)


SERVER_KEYS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "kv_cache_tokens")


def sidecar_path(bench: str | Path) -> Path:
    """`<file>.server.toml` next to a benchmark file: the server settings it ran with, when present."""
    p = Path(bench)
    return p.with_name(p.name + ".server.toml")


def read_server_settings(path: str | Path) -> dict[str, int]:
    """Engine settings of a benchmark's server from a TOML sidecar (keys SERVER_KEYS, positive integers);
    BenchFileError naming the file and the unknown or bad keys."""
    import tomllib

    p = Path(path)
    text = read_text(p, "server settings file", BenchFileError, ceiling=1 << 20)
    try:
        doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as e:
        raise BenchFileError(f"{p}: cannot read server settings ({e.__class__.__name__}: {e})") from None
    unknown = [k for k in doc if k not in SERVER_KEYS]
    if unknown:
        raise BenchFileError(f"{p}: unknown keys {', '.join(unknown)}; known: {', '.join(SERVER_KEYS)}")
    bad = [k for k, v in doc.items() if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS]
    if bad:
        raise BenchFileError(f"{p}: {', '.join(bad)} must be positive integers up to {MAX_TOKENS:.0e}")
    return {k: int(v) for k, v in doc.items()}
