"""Progress, estimates and the memory budget on long work (issue 21 part 3): the library reports what it does
(servescope.progress), the CLI draws a bar for work that has run a second on a terminal and nothing elsewhere,
`--max-memory` replaces the machine's available memory for one command, and a simulation estimated past the time
limit is refused with its estimate.

Expected sizes and counts are written out here (arithmetic on the literals, file sizes from the OS)."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from independent import DATA
from servescope import _paths, progress
from servescope.cli import _memory, _progress, main
from servescope.errors import ScenarioError
from servescope.simulate import budget

PLAIN = DATA / "traces" / "kineto" / "docs_traces" / "before_fix_trace.json"
GZ = DATA / "traces" / "hta" / "trace_diff" / "control" / "control.json.gz"
SIM = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "64"]


@pytest.mark.parametrize(("text", "size"), [
    ("2GB", 2 * 10**9), ("1.5 GiB", 3 * 2**29), ("512mb", 512 * 10**6), ("800M", 800 * 10**6), ("123", 123),
    ("4KiB", 4096), ("0.5t", 5 * 10**11), (" 7 kb ", 7000),
])
def test_sizes_with_units(text: str, size: int) -> None:
    assert _memory.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "2XB", "-1GB", "0", "ib", "5ib", "1e9", "0.1b"])
def test_sizes_that_are_not(text: str) -> None:
    with pytest.raises(click.BadParameter):
        _memory.parse_size(text)


def test_max_memory_is_the_budget_of_one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_paths.MAX_MEMORY_ENV, raising=False)
    result = CliRunner().invoke(main, [*SIM, "--num-prompts", "100000", "--max-memory", "50MB"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "above the limit of 50 MB" in lines[0]
    assert _paths.MAX_MEMORY_ENV not in os.environ  # put back when the command ended
    bad = CliRunner().invoke(main, ["trace", str(PLAIN), "--max-memory", "lots"])
    assert bad.exit_code == 1 and bad.stderr.count("\n") == 1 and "--max-memory" in bad.stderr
    monkeypatch.setenv(_paths.MAX_MEMORY_ENV, "12345")
    assert _paths.available_memory_bytes() == 12345


def test_a_simulation_past_the_time_limit_is_refused_with_its_estimate() -> None:
    shape = budget.run_shape(100_000, 1024, 512, 1536, 64, 256, 1, 1)  # a token budget of 1 per step
    expected_s = (100_000 * 512 / 1 + 100_000 * 1024 / 1 + 100_000 / 64) * budget.SECONDS_PER_STEP
    assert shape.seconds() == pytest.approx(expected_s)
    with pytest.raises(ScenarioError, match=r"would take ~1\.8 h .* above the limit of 60 min"):
        budget.check_time(shape, 3600)
    budget.check_time(shape, None)
    result = CliRunner().invoke(main, [*SIM, "--max-num-batched-tokens", "1", "--num-prompts", "100000",
                                       "--max-memory", "1TB"])  # memory allowed: the time estimate refuses
    assert result.exit_code == 1 and "would take ~1.8 h" in result.stderr


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        self.text: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_bars_only_for_long_work_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    with _progress.showing_progress():  # pytest's stderr is no terminal: no reporter at all
        assert progress._REPORTER.get() is None
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with _progress.showing_progress():
        progress.report("quick", 1, 10)  # has not run a second yet
        bars = progress._REPORTER.get().__self__  # type: ignore[union-attr]
        assert bars.progress is None
        monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)
        progress.report("long", 3, 10)
        assert list(bars.tasks) == ["long"]
        real_getpid = os.getpid
        monkeypatch.setattr(os, "getpid", lambda: -1)  # a forked worker's report: ignored
        progress.report("worker", 1, 10)
        monkeypatch.setattr(os, "getpid", real_getpid)
        assert list(bars.tasks) == ["long"]
        progress.report("long", 10, 10)  # finished work leaves the screen
        assert bars.tasks == {}
    assert progress._REPORTER.get() is None


def test_readers_and_folders_report_what_they_did(tmp_path: Path) -> None:
    from servescope.analysis.ranks import FILES_DONE, analyze_rank_files
    from servescope.trace import load_trace

    seen: list[tuple[str, int, int]] = []
    with progress.reporting(lambda what, done, total: seen.append((what, done, total))):
        load_trace(PLAIN)
        load_trace(GZ)
        folder = tmp_path / "ranks"
        folder.mkdir()
        for i in (0, 1):
            (folder / f"rank{i}.json").write_bytes(PLAIN.read_bytes())
        analyze_rank_files(sorted(folder.iterdir()), workers=1)
    plain = [s for s in seen if s[0] == f"reading {PLAIN.name}"]
    packed = [s for s in seen if s[0] == f"reading {GZ.name}"]
    assert plain[-1][1:] == (PLAIN.stat().st_size,) * 2
    assert packed[-1][1:] == (GZ.stat().st_size,) * 2 and len(gzip.decompress(GZ.read_bytes())) > GZ.stat().st_size
    assert [s for s in seen if s[0] == FILES_DONE] == [(FILES_DONE, 1, 2), (FILES_DONE, 2, 2)]
