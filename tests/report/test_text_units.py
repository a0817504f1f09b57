"""Text output: labels cut with "…", durations in messages in ms / s once they pass 1000 µs (JSON keeps µs)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from independent import DATA, raw_events
from servescope.analysis.findings import _time
from servescope.cli import main
from servescope.report.trace_text import cut

PIECEWISE = DATA / "traces" / "tracelens" / "inference" / "vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
TWO_RANKS = DATA / "traces" / "hta" / "trace_filter"
RAW_LARGE_US = re.compile(r"\b\d[\d,]{3,}(\.\d+)? µs")  # 1000 µs or more, written in µs


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_step_label_too_long_for_its_column_ends_in_an_ellipsis() -> None:
    [label] = {e["name"] for e in raw_events(PIECEWISE) if e.get("name", "").startswith("execute_")}
    assert len(label) > 48
    out = _run("trace", str(PIECEWISE))
    assert f"│ {label[:47]}… │" in out and label not in out


def test_cut() -> None:
    assert cut("abcdef", 6) == "abcdef" and cut("abcdefg", 6) == "abcde…" and len(cut("x" * 99, 48)) == 48


def test_durations_in_messages_use_the_unit_that_keeps_them_short() -> None:
    assert [_time(x) for x in (712.4, 999.4, 4738.0, 273_818.0, 1_250_000.0)] == [
        "712 µs", "999 µs", "4.7 ms", "273.8 ms", "1.25 s"]


def test_no_large_raw_us_in_the_text_of_a_rank_folder_and_the_json_keeps_us() -> None:
    text = _run("trace", str(TWO_RANKS))
    assert "rank_skew" in text and not RAW_LARGE_US.search(text), RAW_LARGE_US.search(text)
    doc = json.loads(_run("trace", str(TWO_RANKS), "--json"))
    [skew] = [f for f in doc["findings"] if f["code"] == "rank_skew"]
    ev = skew["evidence"]
    assert ev["busy_max_us"] > 1e5  # µs in the data, as before
    assert f"max {ev['busy_max_us'] / 1e3:.1f} ms on rank {ev['slowest_rank']}" in skew["message"]
    assert f"differs by {ev['comm_spread_us'] / 1e3:.1f} ms" in skew["message"]
