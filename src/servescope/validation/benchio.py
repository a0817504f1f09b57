"""Read the user's benchmark files from disk: `vllm bench serve --save-result` JSON or `sglang.bench_serving` JSONL,
and files of request lengths (`isl,osl` lines) for the simulation.

What it does: decodes the file (stdlib json: SGLang writes the non-standard `Infinity` for an unbounded request
rate, which strict decoders reject) into (line, object) pairs and hands them to validation.benchfile, which turns
them into runs. Errors name the file and line.
What it does not: interpret keys (validation.benchfile) or simulate anything.
"""

from __future__ import annotations

import json
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
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BenchFileError(f"{path}:{no}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise BenchFileError(f"{path}:{no}: expected a JSON object per line")
        out.append((no, obj))
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
