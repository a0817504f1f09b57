"""The console entry point ends without interpreter teardown (cli/_app.py `run`, `exit_now`): same output, status
and files as a normal exit, atexit handlers still run, and a reader that closes the pipe early gives status 1 with
nothing on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servescope.analysis.analyze import example_trace

EXAMPLE = str(example_trace())


def _servescope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servescope", *args], capture_output=True, text=True, timeout=120)


def test_json_on_stdout_and_status_zero() -> None:
    out = _servescope("trace", "--json", EXAMPLE)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["schema"] == "servescope.trace/1"


def test_error_is_one_line_and_status_one(tmp_path: Path) -> None:
    out = _servescope("trace", str(tmp_path / "missing.json"))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "missing.json" in out.stderr


def test_output_file_is_complete(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    out = _servescope("trace", EXAMPLE, "-o", str(target))
    assert out.returncode == 0, out.stderr
    assert json.loads(target.read_text(encoding="utf-8"))["schema"] == "servescope.trace/1"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind


def test_atexit_handlers_run_and_status_is_kept() -> None:
    code = ("import atexit; atexit.register(lambda: print('handler ran', flush=True)); "
            "from servescope.cli._app import exit_now; print('before'); exit_now(3)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3
    assert out.stdout.splitlines() == ["before", "handler ran"]


def test_message_exit_code_goes_to_stderr_with_status_one() -> None:
    code = "from servescope.cli._app import exit_now; exit_now('servescope: bad thing')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "servescope: bad thing"


def test_reader_closing_the_pipe_early() -> None:
    many = ",".join(str(c) for c in range(1, 400))  # a text table far larger than a pipe's 64 KiB buffer
    proc = subprocess.Popen([sys.executable, "-m", "servescope", "model", "--model", "llama-3.1-8b", "--gpu",
                             "h100_sxm", "--concurrency", many], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_a_full_disk_on_stdout_is_one_line(fmt: list[str]) -> None:
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "servescope", "trace", *fmt, EXAMPLE], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == "servescope: cannot write the output: No space left on device\n"
