"""Atomic file output: write through a temporary file in the target's folder, renamed over the target at the end.

Does: give a writable binary file for `path`; on success the temporary file replaces `path` (readers never see a
half-written file, and the usual umask mode applies); on any failure it is removed, any previous file is left
untouched, and OS errors become one-line `OutputError`s naming the file. Does not: choose formats or encode.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from servescope.errors import OutputError


@contextmanager
def atomic_binary(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file that becomes `path` when the block ends without an exception."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write here: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            yield raw
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual mode
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` (UTF-8, newlines as given) to `path` atomically."""
    with atomic_binary(path) as f:
        f.write(text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
