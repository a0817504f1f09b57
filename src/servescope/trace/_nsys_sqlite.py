"""Open an Nsight Systems SQLite export (or recognise an nsys report) as a file: sniff the SQLite header, refuse
an `.nsys-rep`/`.qdrep` report with the export command, and open the file read-only (`mode=ro&immutable=1`: the
input is never written, no journal or WAL file is created) with a text factory that replaces and counts invalid
UTF-8; any SQLite failure becomes one NotATrace line naming the file.
What it does not do: check that the file is an nsys export or read its tables (trace._nsys_read, which re-exports
`is_nsys`, `is_sqlite` and `check_not_report`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servescope.errors import NotATrace

SQLITE_MAGIC = b"SQLite format 3\x00"


REPORT_SUFFIXES = (
    ".nsys-rep",
    ".qdrep",
)  # Nsight Systems' own report files (binary; need `nsys export`)


def is_nsys(path: Path) -> bool:
    """True for an Nsight Systems SQLite export or report file: what `trace.nsys` handles."""
    return path.name.endswith(REPORT_SUFFIXES) or is_sqlite(path)


def check_not_report(path: Path) -> None:
    """Raise NotATrace, with the export command, for an `.nsys-rep` / `.qdrep` report."""
    if path.name.endswith(REPORT_SUFFIXES):
        raise NotATrace(
            f"{path}: an Nsight Systems report, which only nsys reads; export it first: "
            f"nsys export --type sqlite -o {path.with_suffix('.sqlite').name} {path.name}"
        )


def is_sqlite(path: Path) -> bool:
    """True when `path` is a regular file starting with the SQLite header (a pipe is never sniffed: reading its
    first bytes would take them from the reader that comes next; SQLite needs a seekable file anyway)."""
    try:
        if not path.is_file():
            return False
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


class LossyText:
    """sqlite3 text factory: UTF-8, with invalid bytes replaced (U+FFFD) and counted."""

    def __init__(self) -> None:
        self.n_bad = 0

    def __call__(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            self.n_bad += 1
            return raw.decode(errors="replace")


@contextmanager
def open_readonly(path: Path) -> Iterator[sqlite3.Connection]:
    """Read-only, immutable connection; any SQLite failure becomes one NotATrace line naming the file."""
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise NotATrace(f"{path}: cannot open the SQLite file ({one_line(exc)})") from None
    try:
        yield con
    except (
        sqlite3.Error,
        UnicodeDecodeError,
    ) as exc:  # SQLite's own message may quote invalid UTF-8
        raise NotATrace(
            f"{path}: SQLite file is corrupt or not an Nsight Systems export ({one_line(exc)})"
        ) from None
    finally:
        con.close()


def one_line(exc: Exception) -> str:
    """SQLite's message on one line (a malformed schema message quotes the schema, newlines and all)."""
    return " ".join(str(exc).split())[:200]


def table_names(con: sqlite3.Connection) -> set[str]:
    return {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
