"""The last line of defence (issue 21 parts 1 and 3): Ctrl-C is status 130 and one line with no partial -o file;
a MemoryError or a Polars panic is one line; progress bars only on a terminal's stderr."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import _app, _progress, main

SCENARIO = ["model", "--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]


def _raiser(exc: BaseException):  # noqa: ANN202
    def fail(*_args: object, **_kwargs: object) -> None:
        raise exc
    return fail


def test_ctrl_c_in_a_command_is_130_and_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import servescope.perfmodel as perfmodel

    monkeypatch.setattr(perfmodel, "predict", _raiser(KeyboardInterrupt()))
    out = tmp_path / "m.json"
    result = CliRunner().invoke(main, [*SCENARIO, "-o", str(out)])
    assert result.exit_code == 130
    assert result.stderr == f"{_app.INTERRUPTED}\n"
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_writing_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import servescope.report.atomic as atomic

    monkeypatch.setattr(atomic.os, "replace", _raiser(KeyboardInterrupt()))
    out = tmp_path / "m.json"
    result = CliRunner().invoke(main, [*SCENARIO, "-o", str(out)])
    assert result.exit_code == 130 and result.stderr == f"{_app.INTERRUPTED}\n"
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file


@pytest.mark.parametrize(("exc", "needle"), [
    (MemoryError("Unable to allocate 7.45 GiB for an array with shape (1000000000,)"),
     "servescope: out of memory (Unable to allocate 7.45 GiB for an array with shape (1000000000,)); nothing written"),
    (MemoryError(), "servescope: out of memory; nothing written"),
])
def test_memory_error_is_one_line(monkeypatch: pytest.MonkeyPatch, exc: BaseException, needle: str) -> None:
    import servescope.perfmodel as perfmodel

    monkeypatch.setattr(perfmodel, "predict", _raiser(exc))
    result = CliRunner().invoke(main, SCENARIO)
    assert result.exit_code == 1 and result.stderr == needle + "\n"


def test_polars_panic_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyo3_runtime.PanicException (a BaseException, named so in every pyo3 build) as Polars raises it."""
    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})("capacity overflow")
    import servescope.perfmodel as perfmodel

    monkeypatch.setattr(perfmodel, "predict", _raiser(panic))
    result = CliRunner().invoke(main, SCENARIO)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("servescope: internal error in Polars (a panic: "), lines


def test_other_base_exceptions_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not _app.is_library_panic(KeyboardInterrupt()) and not _app.is_library_panic(ValueError())


def test_real_sigint_mid_run_is_130_without_traceback(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT) during a simulation that would take seconds: 130, one line, no -o file."""
    out = tmp_path / "sim.json"
    args = [sys.executable, "-m", "servescope", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm",
            "--concurrency", "8", "--num-prompts", "50000", "-o", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)  # start-up and imports, then well inside the run
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err == f"{_app.INTERRUPTED}\n"
    assert list(tmp_path.iterdir()) == []


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    with _progress.progress_bar(100, "x") as update:  # stderr is not a terminal under pytest
        assert update is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with _progress.progress_bar(5, "x", min_total=10) as update:
        assert update is None
    with _progress.progress_bar(5, "x", enabled=False) as update:
        assert update is None
    with _progress.progress_bar(20, "points") as update:
        assert update is not None
        for i in range(1, 21):
            update(i)
