"""Read the user's benchmark files from disk: `vllm bench serve --save-result` JSON or `sglang.bench_serving` JSONL,
and files of request lengths (`isl,osl` lines) for the simulation.

What it does: decodes the file (stdlib json: SGLang writes the non-standard `Infinity` for an unbounded request
rate, which strict decoders reject) into (line, object) pairs and hands them to validation.benchfile, which turns
them into runs. Errors name the file and line.
What it does not: interpret keys (validation.benchfile) or simulate anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servescope._paths import is_device
from servescope.errors import ScenarioError
from servescope.validation.benchfile import BenchFileError, BenchRun, read_runs


def _objects(path: Path) -> list[tuple[int, dict[str, object]]]:
    if is_device(path):
        raise BenchFileError(f"{path}: a device, not a benchmark file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchFileError(f"{path}: cannot read benchmark file ({e.__class__.__name__})") from None
    try:
        whole = json.loads(text)
        if isinstance(whole, dict):
            return [(1, whole)]
    except json.JSONDecodeError:
        pass
    out = _jsonl_objects(path, text, BenchFileError)
    if not out:
        raise BenchFileError(f"{path}: no benchmark runs in the file")
    return out


def read_bench(path: str | Path) -> list[BenchRun]:
    """Every run in a vLLM JSON or SGLang JSONL result file."""
    p = Path(path)
    return read_runs(_objects(p), str(p))


def read_lengths(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(isl, osl) arrays from a file of `isl,osl` lines; ScenarioError naming the file and line otherwise."""
    if is_device(path):
        raise ScenarioError(f"{path}: a device, not a lengths file")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read lengths file ({e.__class__.__name__})") from None
    pairs: list[tuple[int, int]] = []
    for no, line in enumerate(text.splitlines(), 1):
        fields = line.replace(",", " ").split()
        if not fields or line.lstrip().startswith("#"):
            continue
        try:
            a, b = (int(x) for x in fields[:2])
        except ValueError:
            if no == 1 and not pairs:
                continue  # a header line
            raise ScenarioError(f"{path}:{no}: expected two integers 'isl,osl', got {line.strip()!r}") from None
        if len(fields) < 2 or a < 1 or b < 1:
            raise ScenarioError(f"{path}:{no}: expected two positive integers 'isl,osl', got {line.strip()!r}")
        pairs.append((a, b))
    if not pairs:
        raise ScenarioError(f"{path}: no 'isl,osl' lines")
    arr = np.asarray(pairs, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


@dataclass(frozen=True)
class Requests:
    """Measured requests to replay: send time (s, any origin), prompt and output tokens, and, when the file has
    them, the measured per-request TTFT, TPOT and E2E (s; NaN where a request lacks one)."""

    path: str
    send_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    measured: dict[str, np.ndarray]  # "ttft_s" | "tpot_s" | "e2e_s" -> per request
    source: str  # which format the file was read as


_REPLAY_COLUMNS = ("arrival_s", "input_len", "output_len")
_MEASURED_COLUMNS = ("ttft_s", "tpot_s", "e2e_s")


def read_requests(path: str | Path) -> Requests:
    """Per-request send times and lengths from a detailed `vllm bench serve --save-result --save-detailed` JSON
    (`start_times`, `input_lens`, `output_lens`, and `ttfts`/`itls` in seconds), or from a CSV / JSONL of requests
    with columns arrival_s,input_len,output_len (optional ttft_s,tpot_s,e2e_s). ScenarioError naming the file and
    what is missing otherwise."""
    p = Path(path)
    if is_device(p):
        raise ScenarioError(f"{p}: a device, not a requests file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{p}: cannot read requests file ({e.__class__.__name__})") from None
    whole = _json_object(text)
    if whole is not None:
        return _vllm_detailed(p, whole)
    rows = _jsonl_rows(p, text) if text.lstrip().startswith("{") else _csv_rows(p, text)
    return _from_rows(p, rows)


def _json_object(text: str) -> dict[str, object] | None:
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return None
    return whole if isinstance(whole, dict) else None


def _floats(p: Path, d: dict[str, object], key: str) -> np.ndarray:
    v = d.get(key)
    if not isinstance(v, list) or not v or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v):
        raise ScenarioError(f"{p}: '{key}' is not a list of numbers (a detailed result, --save-detailed, has it)")
    return np.asarray(v, dtype=float)


def _vllm_detailed(p: Path, d: dict[str, object]) -> Requests:
    missing = [k for k in ("start_times", "input_lens", "output_lens") if k not in d]
    if missing:
        raise ScenarioError(f"{p}: cannot replay: missing per-request keys {', '.join(missing)} "
                            "(vllm bench serve --save-result --save-detailed writes them)")
    send, isl, osl = (_floats(p, d, k) for k in ("start_times", "input_lens", "output_lens"))
    if not len(send) == len(isl) == len(osl):
        raise ScenarioError(f"{p}: start_times, input_lens and output_lens differ in length")
    measured: dict[str, np.ndarray] = {}
    ttfts, itls = d.get("ttfts"), d.get("itls")
    if isinstance(ttfts, list) and len(ttfts) == len(send):
        ttft = np.asarray([float(x) if isinstance(x, int | float) else np.nan for x in ttfts])
        measured["ttft_s"] = ttft
        if isinstance(itls, list) and len(itls) == len(send):
            decode = np.asarray([float(sum(g)) if isinstance(g, list) else np.nan for g in itls])
            measured["e2e_s"] = ttft + decode
            measured["tpot_s"] = np.where(osl > 1, decode / np.maximum(osl - 1, 1), np.nan)
    return Requests(str(p), send, isl.astype(np.int64), osl.astype(np.int64), measured, "vllm detailed result")


def _jsonl_rows(p: Path, text: str) -> list[dict[str, object]]:
    return [obj for _, obj in _jsonl_objects(p, text, ScenarioError)]


def _jsonl_objects(path: Path, text: str, error: type[Exception]) -> list[tuple[int, dict[str, object]]]:
    """(line number, object) of each non-blank line of a JSONL text; `error` naming the file and line otherwise."""
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{no}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{no}: expected a JSON object per line")
        out.append((no, obj))
    return out


def _csv_rows(p: Path, text: str) -> list[dict[str, object]]:
    import csv

    reader = csv.DictReader(text.splitlines())
    return [dict(r) for r in reader]


def _from_rows(p: Path, rows: list[dict[str, object]]) -> Requests:
    if not rows:
        raise ScenarioError(f"{p}: no requests (expected columns {', '.join(_REPLAY_COLUMNS)})")
    missing = [c for c in _REPLAY_COLUMNS if c not in rows[0]]
    if missing:
        raise ScenarioError(f"{p}: missing columns {', '.join(missing)} (expected {', '.join(_REPLAY_COLUMNS)}"
                            f", optional {', '.join(_MEASURED_COLUMNS)})")
    cols = {c: _column(p, rows, c) for c in (*_REPLAY_COLUMNS, *(m for m in _MEASURED_COLUMNS if m in rows[0]))}
    isl, osl = cols["input_len"], cols["output_len"]
    if (isl < 1).any() or (osl < 1).any() or (isl != np.round(isl)).any() or (osl != np.round(osl)).any():
        raise ScenarioError(f"{p}: input_len and output_len must be positive integers")
    measured = {m: cols[m] for m in _MEASURED_COLUMNS if m in cols}
    return Requests(str(p), cols["arrival_s"], isl.astype(np.int64), osl.astype(np.int64), measured,
                    "requests file")


def _column(p: Path, rows: list[dict[str, object]], name: str) -> np.ndarray:
    out = []
    for i, r in enumerate(rows, 1):
        v = r.get(name)
        try:
            out.append(float(v) if v not in (None, "") else np.nan)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ScenarioError(f"{p}: request {i}: {name} {v!r} is not a number") from None
    arr = np.asarray(out, dtype=float)
    if name in _REPLAY_COLUMNS and not np.isfinite(arr).all():
        raise ScenarioError(f"{p}: {name} is missing or not finite in some requests")
    return arr
