"""What `--measured` was given, read into figures: typed figures (calibrate.figures) and benchmark result files
(`vllm bench serve --save-result` JSON, `sglang.bench_serving` JSONL; read by validation.benchio, the tool told
by its keys), in the order given. One parse path for every command that takes `--measured`.

A run of a result file becomes figures at its concurrency, each naming the file and run it came from:
  tpot, ttft, itl, e2e   the run's means (ms in the file)          output   output_throughput (tok/s)
  request_rate           request_throughput (req/s)                 isl, osl the run's mean lengths (rounded)
The run's concurrency: its client cap (max_concurrency) for a closed loop (request rate inf with a cap); for a
Poisson or burst run, the mean number of requests in flight by Little's law, request throughput (completed /
duration when the file has no request_throughput) × mean E2E (SGLang writes the same as `concurrency`), capped at
max_concurrency — said in `notes`. A run with neither is skipped with
a note. A file with keys missing names them (validation.benchfile); an argument that is neither an existing file
nor a typed figure says so.
What a run says it measured is checked against the scenario like a trace (`identity_problems`): the served model
(`model_id`, resolved by specs.models: another bundled model of another architecture is a mismatch; a name servescope
does not know is not judged), the engine (`backend`: vllm, sglang, trt; the client backends `openai*` name no
engine) and the GPU count (`--metadata` layout keys: tp × pp × dp, or num_gpus). Each mismatch is one line naming
the file, the line, the field and both values; the CLI refuses it unless --force (and says so). Runs at other
lengths are set aside by calibrate.figure_fit with both lengths.
Does not: fit anything (calibrate.measured) or judge figures against each other (calibrate.consistency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from servescope.calibrate.figures import SYNTAX, Figure, parse_figure
from servescope.errors import MeasurementError, ServescopeError
from servescope.units import ms_to_s
from servescope.validation.benchfile import BenchRun
from servescope.validation.benchio import read_bench

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario

# figure metric <- (run metric key, factor to SI)
RUN_METRICS: tuple[tuple[str, str, float], ...] = (
    ("tpot", "tpot_ms.mean", ms_to_s(1.0)), ("ttft", "ttft_ms.mean", ms_to_s(1.0)),
    ("itl", "itl_ms.mean", ms_to_s(1.0)), ("e2e", "e2e_ms.mean", ms_to_s(1.0)),
    ("output", "output_tok_s", 1.0), ("request_rate", "request_throughput_per_s", 1.0),
)
_UNITS = {"tpot": "ms", "ttft": "ms", "itl": "ms", "e2e": "ms", "output": "tok/s", "request_rate": "req/s"}


@dataclass(frozen=True)
class MeasuredInputs:
    """The figures, in the order given (a file's runs in file order), and what was read how."""

    figures: tuple[Figure, ...]
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    identities: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (file:line, BenchRun.identity) per run


def _is_file(text: str) -> bool:
    try:
        return bool(text) and "=" not in Path(text).name and Path(text).is_file()
    except (OSError, ValueError):
        return False


def read_measured(specs: Sequence[str]) -> MeasuredInputs:
    """Every `--measured` value: a benchmark result file, or a typed figure (module docstring)."""
    figures: list[Figure] = []
    notes: list[str] = []
    files: list[str] = []
    identities: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for spec in specs:
        if _is_file(spec):
            got, said = run_figures_of(spec)
            figures.extend(got)
            notes.extend(said)
            files.append(spec)
            identities.extend((f"{r.path}:{r.line}", r.identity) for r in read_bench(spec) if r.identity)
        elif "=" in spec:
            figures.append(parse_figure(spec))
        else:
            raise MeasurementError(f"--measured {spec!r}: no such file, and not a typed figure ({SYNTAX}; or a "
                                   "vllm bench serve --save-result JSON / sglang.bench_serving JSONL file)")
    return MeasuredInputs(tuple(figures), tuple(notes), tuple(files), tuple(identities))


def run_figures_of(path: str | Path) -> tuple[list[Figure], list[str]]:
    """The figures of every run in a result file, and the notes on how their concurrency was read."""
    figures: list[Figure] = []
    notes: list[str] = []
    for run in read_bench(path):
        c, how = run_concurrency(run)
        if c is None:
            notes.append(f"{run.label()}: skipped: {how}")
            continue
        if how:
            notes.append(f"{run.label()}: {how}")
        figures.extend(run_figures(run, c))
    if not figures:
        raise MeasurementError(f"{path}: no run with a concurrency and a metric to calibrate on "
                               f"({'; '.join(notes) or 'no metrics'})")
    return figures, notes


def run_concurrency(run: BenchRun) -> tuple[int | None, str]:
    """(concurrency, how it was read; "" for a closed loop at its cap) of a run (module docstring)."""
    if math.isinf(run.request_rate_per_s) and run.max_concurrency:
        return run.max_concurrency, ""
    duration = run.metrics.get("duration_s")
    rate = run.metrics.get("request_throughput_per_s") or (run.completed / duration if duration else None)
    e2e_ms = run.metrics.get("e2e_ms.mean")
    if rate is None or e2e_ms is None or rate <= 0 or e2e_ms <= 0:
        return None, "no client cap and no request throughput × mean E2E to read the concurrency from"
    in_flight = rate * ms_to_s(e2e_ms)
    c = max(1, round(min(in_flight, run.max_concurrency or math.inf)))
    load = "all sent at once" if math.isinf(run.request_rate_per_s) else f"Poisson at {run.request_rate_per_s:g} req/s"
    return c, (f"concurrency {c}: the mean requests in flight by Little's law (request throughput {rate:.3g}/s × "
               f"mean E2E {e2e_ms / 1e3:.3g} s = {in_flight:.3g}); the run was {load}, not a closed loop")


def run_figures(run: BenchRun, concurrency: int) -> list[Figure]:
    """One figure per metric the run has (RUN_METRICS), at `concurrency` and the run's mean lengths."""
    isl, osl = max(1, round(run.mean_isl)), max(1, round(run.mean_osl))
    out = []
    for metric, key, factor in RUN_METRICS:
        v = run.metrics.get(key)
        if v is None or not math.isfinite(v) or v <= 0:
            continue
        text = f"{metric}={v:.6g}{_UNITS[metric]}@c{concurrency},isl={isl},osl={osl}"
        out.append(Figure(metric, v * factor, concurrency, isl, osl, text, source=run.label()))
    return out


# `backend` of a result file -> the engine it names (vLLM's client backends `openai`, `openai-chat` name none)
_ENGINE_OF = {"vllm": "vllm", "sglang": "sglang", "sglang-oai": "sglang", "sglang-native": "sglang",
              "trt": "trtllm", "trtllm": "trtllm", "tensorrt-llm": "trtllm", "lmdeploy": "lmdeploy"}
_LAYOUT_KEYS = (("tensor_parallel_size", "tp", "tp_size"), ("pipeline_parallel_size", "pp"),
                ("data_parallel_size", "dp"))
_ARCH = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "intermediate_size", "moe_intermediate_size",
         "n_routed_experts", "top_k", "vocab_size")


def identity_problems(identities: Sequence[tuple[str, Sequence[tuple[str, str]]]], sc: Scenario) -> list[str]:
    """One line per field a run states that disagrees with the scenario (module docstring): `FILE:LINE: field
    'value' …, the scenario's …`."""
    out: list[str] = []
    for where, pairs in identities:
        got = dict(pairs)
        name = got.get("model_id") or got.get("model")
        other = _other_model(name, sc) if name else None
        if other is not None:
            key = "model_id" if "model_id" in got else "model"
            out.append(f"{where}: {key} {name!r} is {other}, not the scenario's model {sc.model.name} (another "
                       "architecture)")
        engine = _ENGINE_OF.get(got.get("backend", "").strip().lower())
        if engine is not None and engine != sc.backend:
            out.append(f"{where}: backend {got['backend']!r} is {engine}, not the scenario's backend {sc.backend}")
        gpus, keys = _gpus(got)
        if gpus is not None and gpus != sc.n_gpus:
            out.append(f"{where}: {keys} say {gpus} GPUs, the scenario has {sc.n_gpus} (TP={sc.tp} PP={sc.pp} "
                       f"DP={sc.dp})")
    return out


def _other_model(name: str, sc: Scenario) -> str | None:
    """The bundled model `name` resolves to when it is another architecture than the scenario's; None when it is
    the same model (or a quantized variant of it) or servescope does not know the name."""
    from servescope.specs.models import load_model

    base = Path(name).name
    short = base.lower().removesuffix("-instruct").removesuffix("-chat")
    for candidate in dict.fromkeys((name, base, short)):
        try:
            spec = load_model(candidate)
        except (ServescopeError, OSError, ValueError):
            continue
        if spec.source == sc.model.source or all(getattr(spec, a) == getattr(sc.model, a) for a in _ARCH):
            return None
        return spec.source.removeprefix("bundled:").removesuffix("_config.json").replace("--", "/")
    return None


def _gpus(got: dict[str, str]) -> tuple[int | None, str]:
    """The GPU count the run's layout keys state (num_gpus, or tp × pp × dp) and which keys said it."""
    def number(key: str) -> int | None:
        try:
            v = float(got[key])
        except (KeyError, ValueError):
            return None
        return int(v) if v.is_integer() and v >= 1 else None

    for key in ("num_gpus", "gpus"):
        if (n := number(key)) is not None:
            return n, key
    sizes = []
    for group in _LAYOUT_KEYS:  # the first key of each group the run has
        found = next(((k, n) for k in group if (n := number(k)) is not None), None)
        sizes += [found] if found else []
    if not sizes or sizes[0][0] not in _LAYOUT_KEYS[0]:  # no tensor-parallel size: the count is not stated
        return None, ""
    total = 1
    for _, n in sizes:
        total *= n
    return total, " × ".join(f"{k}={n}" for k, n in sizes)
