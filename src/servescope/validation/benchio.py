"""Read the user's benchmark files from disk: `vllm bench serve --save-result` JSON or `sglang.bench_serving` JSONL,
and files of request lengths (`isl,osl` lines) for the simulation.

What it does: decodes the file (stdlib json: SGLang writes the non-standard `Infinity` for an unbounded request
rate, which strict decoders reject) into (line, object) pairs and hands them to validation.benchfile, which turns
them into runs. Errors name the file and line.
What it does not: interpret keys (validation.benchfile) or simulate anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servescope._paths import decode_json, each_json_line, read_text
from servescope.errors import ScenarioError, ServescopeError
from servescope.validation.benchfile import BenchFileError, BenchRun, read_runs


def _objects(path: Path) -> list[tuple[int, dict[str, object]]]:
    text = read_text(path, "benchmark result file", BenchFileError)
    whole = _json_object(path, text, BenchFileError)
    if whole is not None:
        return [(1, whole)]
    out = jsonl_objects(path, text, BenchFileError)
    if not out:
        raise BenchFileError(f"{path}: no benchmark runs in the file")
    return out


def read_bench(path: str | Path) -> list[BenchRun]:
    """Every run in a vLLM JSON or SGLang JSONL result file."""
    p = Path(path)
    return read_runs(_objects(p), str(p))


def read_lengths(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(isl, osl) arrays from a file of `isl,osl` lines; ScenarioError naming the file and line otherwise."""
    text = read_text(path, "lengths file", ScenarioError)
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
            raise ScenarioError(f"{path}:{no}: expected two integers 'isl,osl', got {line.strip()[:60]!r}") from None
        if len(fields) < 2 or not (1 <= a <= MAX_TOKENS and 1 <= b <= MAX_TOKENS):
            raise ScenarioError(f"{path}:{no}: expected two whole numbers of tokens in [1, {MAX_TOKENS:.0e}] "
                                f"'isl,osl', got {line.strip()[:60]!r}")
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
    text = read_text(p, "requests file", ScenarioError)
    whole = _json_object(p, text, ScenarioError)
    if whole is not None:
        return _vllm_detailed(p, whole)
    columns, n = _jsonl_columns(p, text) if text.lstrip().startswith("{") else _csv_columns(p, text)
    return _from_columns(p, columns, n)


def _json_object(path: Path, text: str, error: type[ScenarioError]) -> dict[str, object] | None:
    """The file as one JSON object; None when it is not one document (JSON lines, CSV). A text that is one
    document but not one this reader takes (nested too deeply, a number beyond the codec) is `error`."""
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return None
    first, _, rest = text.lstrip().partition("\n")
    if head == "{" and rest.strip() and first.rstrip().endswith("}"):
        return None  # one object per line: JSON lines
    try:
        whole = decode_json(text, path, error)
    except error:
        if head == "{" and rest.strip():
            return None  # JSON lines, read line by line (each line's error names it)
        raise
    return whole if isinstance(whole, dict) else None


MAX_TOKENS = 10**7  # a request's prompt or output length: the longest context window (10 M tokens)
MAX_SECONDS = 10**9  # a latency (s): ~32 years
MAX_SEND_S = 10**13  # a send time (s, any origin: Unix epoch seconds are ~1.7e9)


def _number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _floats(p: Path, d: dict[str, object], key: str) -> np.ndarray:
    v = d.get(key)
    if not isinstance(v, list) or not v or not all(_number(x) for x in v):
        raise ScenarioError(f"{p}: '{key}' is not a list of numbers (a detailed result, --save-detailed, has it)")
    arr = np.asarray(v, dtype=float)
    if not (np.isfinite(arr).all() and (np.abs(arr) <= MAX_SEND_S).all()):
        raise ScenarioError(f"{p}: field {key}: a value is NaN, infinite or beyond {MAX_SEND_S:.0e} (expected "
                            "finite send times in s and token counts)")
    return arr


def _lengths_ok(p: Path, isl: np.ndarray, osl: np.ndarray, what: tuple[str, str]) -> None:
    for name, arr in ((what[0], isl), (what[1], osl)):
        if (arr < 1).any() or (arr > MAX_TOKENS).any() or (arr != np.round(arr)).any():
            raise ScenarioError(f"{p}: field {name}: expected whole numbers of tokens in [1, {MAX_TOKENS:.0e}]")


def _seconds(x: object) -> float:
    """A measured latency (s), NaN where missing or not a finite number in range."""
    return float(x) if _number(x) and math.isfinite(float(x)) and 0 <= float(x) <= MAX_SECONDS else math.nan  # type: ignore[arg-type]


def _decode_s(g: object) -> float:
    """The sum of a request's inter-token latencies (s), NaN unless a list of finite numbers."""
    if not isinstance(g, list) or not all(_number(x) for x in g):
        return math.nan
    return _seconds(math.fsum(float(x) for x in g) if all(math.isfinite(float(x)) for x in g) else math.nan)


def _vllm_detailed(p: Path, d: dict[str, object]) -> Requests:
    missing = [k for k in ("start_times", "input_lens", "output_lens") if k not in d]
    if missing:
        raise ScenarioError(f"{p}: cannot replay: missing per-request keys {', '.join(missing)} "
                            "(vllm bench serve --save-result --save-detailed writes them)")
    send, isl, osl = (_floats(p, d, k) for k in ("start_times", "input_lens", "output_lens"))
    if not len(send) == len(isl) == len(osl):
        raise ScenarioError(f"{p}: start_times, input_lens and output_lens differ in length")
    _lengths_ok(p, isl, osl, ("input_lens", "output_lens"))
    measured: dict[str, np.ndarray] = {}
    ttfts, itls = d.get("ttfts"), d.get("itls")
    if isinstance(ttfts, list) and len(ttfts) == len(send):
        ttft = np.asarray([_seconds(x) for x in ttfts], dtype=float)
        measured["ttft_s"] = ttft
        if isinstance(itls, list) and len(itls) == len(send):
            decode = np.asarray([_decode_s(g) for g in itls], dtype=float)
            measured["e2e_s"] = ttft + decode
            measured["tpot_s"] = np.where(osl > 1, decode / np.maximum(osl - 1, 1), np.nan)
    return Requests(str(p), send, isl.astype(np.int64), osl.astype(np.int64), measured, "vllm detailed result")


_WANTED = (*_REPLAY_COLUMNS, *_MEASURED_COLUMNS)


def _jsonl_columns(p: Path, text: str) -> tuple[dict[str, list[object]], int]:
    """The replay columns of a JSON-lines requests file (a column is present when the first request has it), and
    the number of requests."""
    rows = [obj for _, obj in jsonl_objects(p, text, ScenarioError)]
    return ({c: [r.get(c) for r in rows] for c in _WANTED if c in rows[0]} if rows else {}), len(rows)


def jsonl_objects(path: Path, text: str, error: type[ServescopeError]) -> list[tuple[int, dict[str, object]]]:
    """(line number, object) of each non-blank line of a JSONL text; `error` naming the file and line otherwise."""
    out = []
    for no, obj in each_json_line(text, path, error):
        if not isinstance(obj, dict):
            raise error(f"{path}:{no}: expected a JSON object per line")
        out.append((no, obj))
    return out


def _csv_columns(p: Path, text: str) -> tuple[dict[str, list[object]], int]:
    """The replay columns of a CSV requests file, read row by row into one list per column (no dict per row:
    a million requests hold ~3 lists of strings), and the number of requests."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader, [])]
        where = [(c, header.index(c)) for c in _WANTED if c in header]
        columns: dict[str, list[object]] = {c: [] for c, _ in where}
        n = 0
        for row in reader:
            if not row:
                continue
            n += 1
            for c, i in where:
                columns[c].append(row[i] if i < len(row) else None)
    except csv.Error as e:  # a field over the module's 128 KB limit, a NUL: the reader stops at the line
        raise ScenarioError(f"{p}:{reader.line_num}: not a CSV row this reader takes ({e})") from None
    return columns, n


def _from_columns(p: Path, columns: dict[str, list[object]], n: int) -> Requests:
    if not n:
        raise ScenarioError(f"{p}: no requests (expected columns {', '.join(_REPLAY_COLUMNS)})")
    missing = [c for c in _REPLAY_COLUMNS if c not in columns]
    if missing:
        raise ScenarioError(f"{p}: missing columns {', '.join(missing)} (expected {', '.join(_REPLAY_COLUMNS)}"
                            f", optional {', '.join(_MEASURED_COLUMNS)})")
    cols = {c: _column(p, values, c) for c, values in columns.items()}
    isl, osl = cols["input_len"], cols["output_len"]
    _lengths_ok(p, isl, osl, ("input_len", "output_len"))
    measured = {m: cols[m] for m in _MEASURED_COLUMNS if m in cols}
    return Requests(str(p), cols["arrival_s"], isl.astype(np.int64), osl.astype(np.int64), measured,
                    "requests file")


def _column(p: Path, values: list[object], name: str) -> np.ndarray:
    """One column as floats (NaN where empty); ScenarioError naming the first request whose cell is no number."""
    if values and all(type(v) is str for v in values):  # CSV text: NumPy parses it (the loop below says where not)
        try:
            return _bounded_column(p, np.asarray(values, dtype=float), name)
        except ValueError:
            pass
    out = []
    for i, v in enumerate(values, 1):
        if v is None or v == "":
            out.append(np.nan)
            continue
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise ScenarioError(f"{p}: request {i}: {name} {str(v)[:40]!r} is not a number")
        try:
            out.append(float(v))
        except ValueError:
            raise ScenarioError(f"{p}: request {i}: {name} {str(v)[:40]!r} is not a number") from None
    return _bounded_column(p, np.asarray(out, dtype=float), name)


def _bounded_column(p: Path, arr: np.ndarray, name: str) -> np.ndarray:
    bound = MAX_SEND_S if name == "arrival_s" else MAX_SECONDS
    if name in _REPLAY_COLUMNS and not (np.isfinite(arr).all() and (np.abs(arr) <= bound).all()):
        raise ScenarioError(f"{p}: {name} is missing, not finite or beyond {bound:.0e} in some requests")
    return np.where(np.isfinite(arr) & (np.abs(arr) <= bound), arr, np.nan)
