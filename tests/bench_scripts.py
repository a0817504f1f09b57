"""Load a script of bench/ or data-build/ as a module, so tests can check what it computes and writes."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
# bench/ measures (speed, memory, accuracy); data-build/ writes the data files shipped in src/. A name is in one.
FOLDERS = (ROOT / "bench", ROOT / "data-build")


def script_path(name: str) -> Path:
    """bench/<name>.py or data-build/<name>.py, whichever exists (a script lives in exactly one)."""
    found = [p for p in (d / f"{name}.py" for d in FOLDERS) if p.is_file()]
    if len(found) != 1:
        where = " and ".join(str(p.relative_to(ROOT)) for p in found) or "neither bench/ nor data-build/"
        raise FileNotFoundError(f"script {name!r}: found in {where}")
    return found[0]


@functools.cache
def bench_script(name: str) -> ModuleType:
    """bench/<name>.py or data-build/<name>.py, executed once per test process."""
    spec = importlib.util.spec_from_file_location(name, script_path(name))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod
