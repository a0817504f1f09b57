"""`servescope trace --timings` (issue 30 item 1): one note on stderr naming each stage's wall time, the result
unchanged; the stage timer of servescope.progress. Structure only: no assertion on how long anything takes."""

from __future__ import annotations

import re

from click.testing import CliRunner

from servescope.cli import main
from servescope.cli.trace_cmd import STAGES
from servescope.progress import stage, timing

LINE = re.compile(r"servescope: note: timings \(wall s\): (?P<stages>.*); other (?P<other>-?\d+\.\d{3}); "
                  r"command (?P<total>\d+\.\d{3}) \(interpreter start and CLI import not included\)")


def test_timings_name_every_stage_in_order_and_leave_the_result_alone() -> None:
    plain = CliRunner().invoke(main, ["trace", "--json"])
    timed = CliRunner().invoke(main, ["trace", "--json", "--timings"])
    assert plain.exit_code == timed.exit_code == 0
    assert timed.stdout == plain.stdout
    lines = timed.stderr.splitlines()
    assert len(lines) == 1 and (match := LINE.fullmatch(lines[0])), lines
    pairs = [part.rsplit(" ", 1) for part in match["stages"].split(", ")]
    assert [name for name, _ in pairs] == list(STAGES)  # one file in process: every stage runs
    seconds = [float(s) for _, s in pairs]
    assert min(seconds) >= 0 and sum(seconds) <= float(match["total"]) + 0.002  # rounding of 8 numbers
    assert "timings" not in plain.stderr


def test_stage_reports_to_the_callback_only_inside_timing() -> None:
    got: list[tuple[str, float]] = []
    with stage("outside"):
        pass
    with timing(lambda name, s: got.append((name, s))):
        with stage("a"):
            pass
        with timing(None), stage("muted"):  # an inner None silences, and the outer callback comes back after
            pass
        try:
            with stage("b"):
                raise ValueError
        except ValueError:
            pass
    with stage("after"):
        pass
    assert [name for name, _ in got] == ["a", "b"]  # a stage that raised is still timed
    assert all(s >= 0 for _, s in got)
