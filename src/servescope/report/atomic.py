"""Atomic file output: write through a temporary file in the target's folder, renamed over the target at the end.

Does: give a writable binary file for `path`; on success the temporary file replaces `path` (readers never see a
half-written file; a new file gets the usual umask mode, a replaced one keeps its mode); on any failure — SIGINT
and SIGTERM included — it is removed, any previous file is left untouched, and OS errors become one-line
`OutputError`s naming the file. An existing file that is read-only (no write permission for this user; as root,
no write bit at all, since root may write anyway) is refused, never chmod-ed and replaced. A symlink to a file is followed (the file
is replaced, the link kept); a path that is not a regular file — a device, FIFO or socket (`-o /dev/stdout`,
`/dev/null`, a named pipe) — is written in place, never replaced (a rename over it, as root, would swap a device
node for a plain file). Does not: choose formats or encode.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import threading
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
    mode = _existing_mode(path, target)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except (OSError, ValueError) as exc:
        raise OutputError(f"{path}: cannot write here: {_why(exc)}") from None
    try:
        with _terminate_as_exit(), os.fdopen(fd, "wb") as raw:
            yield raw
            raw.flush()
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {_why(exc)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _existing_mode(path: Path, target: Path) -> int | None:
    """The permission bits of an existing regular `target` (kept on replace), None when there is none; raises
    OutputError when it is read-only for this user (as root, when no write bit is set: root writes anyway)."""
    try:
        st = os.stat(target)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    writable = st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) if _is_root() else os.access(target, os.W_OK)
    if not writable:
        raise OutputError(f"{path}: is read-only; servescope does not replace it (choose another -o, or make it "
                          "writable)")
    return stat.S_IMODE(st.st_mode)


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


class Terminated(SystemExit):
    """SIGTERM while an output file is written: unwinds like Ctrl-C, so the temporary file is removed."""

    def __init__(self) -> None:
        super().__init__("servescope: terminated (SIGTERM); nothing written")


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """While the block runs (main thread only, where Python delivers signals), SIGTERM raises Terminated instead
    of killing the process on the spot; the previous handler comes back afterwards. A handler set by someone
    else (not the default) is left alone."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
