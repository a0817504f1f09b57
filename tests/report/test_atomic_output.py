"""report.atomic: regular files are replaced atomically; devices, FIFOs and sockets are written in place and never
replaced (as root a rename over /dev/full once turned the device into a plain file); symlinks keep pointing where
they did."""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from servescope.errors import OutputError
from servescope.report.atomic import write_text_atomically

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev are POSIX")


def test_regular_file_is_replaced_and_no_temporary_is_left(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")
    write_text_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


@posix_only
def test_symlink_keeps_pointing_at_its_file(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_atomically(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text(encoding="utf-8") == "new"


@posix_only
def test_fifo_is_written_in_place_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_text_atomically(fifo, "through the pipe")
    reader.join(timeout=30)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@posix_only
def test_dev_null_stays_a_device() -> None:
    write_text_atomically(Path(os.devnull), "discarded")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_full_device_is_one_line_error_and_stays_a_device() -> None:
    with pytest.raises(OutputError, match=r"^/dev/full: cannot write: No space left on device$"):
        write_text_atomically(Path("/dev/full"), "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.parametrize("make", [lambda d: d / ("x" * 300 + ".json"),  # a name longer than the file system allows
                                  lambda d: d / "missing" / "out.json",
                                  lambda d: d / "plain.txt" / "out.json"])  # a file where a folder should be
def test_unwritable_targets_are_one_line_errors(tmp_path: Path, make: object) -> None:
    (tmp_path / "plain.txt").write_text("", encoding="utf-8")
    target = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(OutputError, match=r"^.+: cannot write here: [^\n]+$"):
        write_text_atomically(target, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt"]
