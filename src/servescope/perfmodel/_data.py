"""The perfmodel's packaged TOML data (data/*.toml, simulate/engines.toml): one reader, one error for a bad file."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

from servescope.errors import BadConfig


def read_toml(*parts: str) -> dict[str, Any]:
    """Parse the file at `parts` under the servescope.perfmodel package; a file that does not parse raises
    BadConfig naming it (perfmodel/<parts>)."""
    path = resources.files("servescope.perfmodel").joinpath(*parts)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BadConfig(f"perfmodel/{'/'.join(parts)}: {e}") from None
