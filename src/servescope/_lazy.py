"""Lazy package attributes (PEP 562), one implementation for every package that re-exports names it loads late.

Does: `lazy_module(package, table, public)` → the package's `__getattr__` and `__dir__`: a name of `table` (name →
module) is imported on first use and kept in the package's namespace; `dir()` shows the public names too.
Why: `servescope trace` must not import the model's 40 modules just to reach one re-exported name (issue 30).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_module(package: str, table: Mapping[str, str],
                public: Iterable[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package` for the late names of `table` (module docstring)."""
    names = tuple(public)

    def __getattr__(name: str) -> Any:
        if name in table:
            value = getattr(importlib.import_module(table[name]), name)
            setattr(sys.modules[package], name, value)  # looked up once
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
