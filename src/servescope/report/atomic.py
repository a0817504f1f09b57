"""Atomic file output: write through a temporary file in the target's folder, renamed over the target at the end.

Does: give a writable binary file for `path`; on success the temporary file replaces `path` (readers never see a
half-written file, and the usual umask mode applies); on any failure it is removed, any previous file is left
untouched, and OS errors become one-line `OutputError`s naming the file. A symlink to a file is followed (the file
is replaced, the link kept); a path that is not a regular file — a device, FIFO or socket (`-o /dev/stdout`,
`/dev/null`, a named pipe) — is written in place, never replaced (a rename over it, as root, would swap a device
node for a plain file). Does not: choose formats or encode.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from servescope.errors import OutputError


@contextmanager
def atomic_binary(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file that becomes `path` when the block ends without an exception."""
    try:
        special = _special(path)
        target = Path(os.path.realpath(path)) if not special and path.is_symlink() else path
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte (only reachable from Python callers)
        raise OutputError(f"{path}: cannot write here: {_why(exc)}") from None
    if special:
        with _in_place(path) as raw:
            yield raw
        return
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except (OSError, ValueError) as exc:
        raise OutputError(f"{path}: cannot write here: {_why(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            yield raw
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual mode
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {_why(exc)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _special(path: Path) -> bool:
    """An existing path (links followed) that is neither a regular file nor a folder: a device, FIFO or socket."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


@contextmanager
def _in_place(path: Path) -> Iterator[BinaryIO]:
    """The special file itself, opened for writing; OS errors as one-line OutputErrors."""
    try:
        raw = open(path, "wb")  # noqa: SIM115  (closed below, where its errors are caught too)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write here: {_why(exc)}") from None
    try:
        with raw:
            yield raw
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {_why(exc)}") from None


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def write_text_atomically(path: Path, text: str) -> None:
    """Write `text` (UTF-8, newlines as given) to `path` atomically."""
    with atomic_binary(path) as f:
        f.write(text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
