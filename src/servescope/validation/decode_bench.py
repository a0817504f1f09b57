"""Decode-only benchmark results as `validate` rows: `vllm bench latency --output-json` and `sglang.bench_one_batch`.

What it does: reads one result file, tells the two formats apart by their keys and turns each measurement into a
validation.decode_only DecodeRow (module docstring there: what `step` and `batch` mean), with the deployment
(model, GPU, layout, engine, quantization) given by the caller — neither file records it. Formats, as the tools
write them:
  * vLLM `vllm bench latency --output-json FILE` (vllm-project/vllm, vllm/benchmarks/latency.py; before the `vllm
    bench` CLI benchmarks/benchmark_latency.py): one JSON object {"avg_latency", "std_latency", "latencies",
    "percentiles": {"10", "25", "50", "75", "90", "99"}}, seconds, each latency one `llm.generate` of batch_size
    prompts of input_len random tokens with max_tokens = output_len and ignore_eos (one prefill, output_len − 1
    decode steps). The file holds no batch size or lengths: the caller passes them (vLLM's defaults are 8, 32, 128);
    one row, measure `batch`, TPOT = avg_latency / output_len; n (sequences per prompt) is taken as 1.
  * SGLang `python -m sglang.bench_one_batch --result-filename FILE` (sgl-project/sglang,
    python/sglang/bench_one_batch.py, `latency_test_run_once`): JSON lines appended per run, each {"run_name",
    "batch_size", "input_len", "output_len", "prefill_latency", "prefill_throughput", "median_decode_latency",
    "median_decode_throughput", "total_latency", "overall_throughput"} (seconds, tokens/s); one row per line,
    measure `step`, TPOT = median_decode_latency (the median of the output_len − 1 decode steps of the static
    batch); a line without it (output_len 1) is skipped with that reason.
Each row's `source` is the file name (crossval and the report group by it). Errors (DecodeRowError) name the file
and line and the key.
What it does not: price rows (validation.decode_only) or read `bench serve` files (validation.benchio).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from servescope._paths import decode_json, read_text
from servescope.units import MS_PER_S
from servescope.validation.benchio import jsonl_objects
from servescope.validation.decode_only import BATCH, STEP, DecodeRow, DecodeRowError, Deployment

VLLM_KEYS = ("avg_latency", "latencies")
MAX_VALUE = 1e7  # a batch, a length in tokens, a latency in s: beyond any run (integers > 18 digits decode as floats)
SGLANG_KEYS = ("batch_size", "input_len", "output_len", "median_decode_latency")


@dataclass(frozen=True)
class Lengths:
    """What a `vllm bench latency` run was given (--batch-size, --input-len, --output-len): the file lacks them."""

    batch_size: int
    input_len: int
    output_len: int


def read_decode_bench(path: str | Path, deployment: Deployment,
                      lengths: Lengths | None = None) -> tuple[list[DecodeRow], list[tuple[str, str]]]:
    """(rows, skipped lines with their reasons) of a vLLM latency JSON or an SGLang bench_one_batch JSONL."""
    p = Path(path)
    text = read_text(p, "benchmark file", DecodeRowError)
    try:
        whole = decode_json(text, p, DecodeRowError)
    except DecodeRowError:  # JSON lines, read line by line below (each line's error names it)
        whole = None
    if isinstance(whole, dict) and all(k in whole for k in VLLM_KEYS):
        return [_vllm_row(p, whole, deployment, lengths)], []
    objects = [(1, whole)] if isinstance(whole, dict) else jsonl_objects(p, text, DecodeRowError)
    if not objects or not any(k in objects[0][1] for k in ("run_name", "median_decode_latency", "prefill_latency")):
        raise DecodeRowError(f"{p}: neither a `vllm bench latency --output-json` result (keys avg_latency, latencies) "
                             "nor `sglang.bench_one_batch` JSON lines (run_name, batch_size, median_decode_latency)")
    rows: list[DecodeRow] = []
    skipped: list[tuple[str, str]] = []
    for line, obj in objects:
        row = _sglang_row(p, line, obj, deployment)
        if isinstance(row, str):
            skipped.append((f"{p.name}:{line}", row))
        else:
            rows.append(row)
    return rows, skipped


def _positive(where: str, obj: dict[str, object], key: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v <= MAX_VALUE:
        raise DecodeRowError(f"{where}: key {key}: expected a positive number up to {MAX_VALUE:.0e}, got {v!r}")
    return float(v)


def _vllm_row(p: Path, d: dict[str, object], dep: Deployment, lengths: Lengths | None) -> DecodeRow:
    if lengths is None:
        raise DecodeRowError(f"{p}: a `vllm bench latency` result records no batch size or lengths: give "
                             "--batch-size, --input-len and --output-len as the run had them (vLLM's defaults: 8, 32, 128)")
    latency_s = _positive(f"{p}:1", d, "avg_latency")
    b, isl, osl = lengths.batch_size, lengths.input_len, lengths.output_len
    return DecodeRow(f"{p.name} b{b} in{isl} out{osl}", p.name, dep, b, int(isl + osl / 2.0),
                     latency_s * MS_PER_S / osl, BATCH, isl, osl)


def _sglang_row(p: Path, line: int, obj: dict[str, object], dep: Deployment) -> DecodeRow | str:
    where = f"{p}:{line}"
    b, isl, osl = (int(_positive(where, obj, k)) for k in ("batch_size", "input_len", "output_len"))
    if "median_decode_latency" not in obj:
        return f"no decode steps measured (output_len {osl}: bench_one_batch records median_decode_latency from 2)"
    step_s = _positive(where, obj, "median_decode_latency")
    run = str(obj.get("run_name") or "")
    return DecodeRow(f"{p.name}:{line} {run} b{b} in{isl} out{osl}".replace("  ", " "), p.name, dep, b,
                     int(isl + osl / 2.0), step_s * MS_PER_S, STEP, isl, osl)
