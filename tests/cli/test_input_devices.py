"""Inputs that are devices get one line and exit 1 instead of being read for ever (`/dev/zero`); inputs that are
pipes are read once, whole (`<(zcat trace.json.gz)` gives the same analysis as the file)."""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope._paths import is_device
from servescope.analysis.analyze import example_trace
from servescope.cli import main

ZERO = Path("/dev/zero")
needs_dev_zero = pytest.mark.skipif(not ZERO.exists(), reason="needs /dev/zero (POSIX)")
SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm"]


def test_is_device(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x", encoding="utf-8")
    assert not is_device(tmp_path / "f")
    assert not is_device(tmp_path)
    assert not is_device(tmp_path / "missing")
    assert not is_device("bad\x00name")
    if ZERO.exists():
        assert is_device(ZERO)


@needs_dev_zero
@pytest.mark.parametrize("args", [
    ["trace", str(ZERO)],
    ["diff", str(ZERO), str(ZERO)],
    ["export", str(ZERO), "-o", "{tmp}/out.json"],
    ["validate", str(ZERO)],
    ["simulate", *SCENARIO, "--lengths", str(ZERO)],
    ["simulate", *SCENARIO, "--compare", str(ZERO)],
    ["plan", str(ZERO), *SCENARIO],
])
def test_a_device_is_one_line(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and "/dev/zero" in result.stderr
    assert "device" in result.stderr or "not a regular file" in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="named pipes are POSIX")
def test_a_pipe_is_read_once_and_gives_the_files_analysis(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    payload = gzip.decompress(example_trace().read_bytes())
    writer = threading.Thread(target=lambda: fifo.write_bytes(payload))
    writer.start()
    piped = CliRunner().invoke(main, ["trace", "--json", str(fifo)])
    writer.join(timeout=60)
    from_file = CliRunner().invoke(main, ["trace", "--json", str(example_trace())])
    assert piped.exit_code == 0, piped.stderr
    a, b = json.loads(piped.stdout), json.loads(from_file.stdout)
    assert a["ranks"][0]["steps"] == b["ranks"][0]["steps"]
