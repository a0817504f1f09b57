"""docs/capture.md cannot drift: its tables of formats, rank file names and step labels are read from the page
and checked against the code (each format's example file loads and has GPU events; each name gives the stated
rank; each label gives the stated kind, batch and tokens)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from independent import DATA, raw_events
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.steps import parse_step_label
from servescope.trace import Trace, load_trace, load_traces
from servescope.trace.folder import list_trace_files, rank_from_name
from servescope.trace.types import GPU_EVENT_KINDS

DOC = Path(__file__).parents[2] / "docs" / "capture.md"


def _table(marker: str) -> list[list[str]]:
    """Rows (cells without backticks) of the markdown table after `<!-- tested: marker -->`."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(f"<!-- tested: {marker} -->", 1)[1].strip().split("\n\n", 1)[0]
    rows = [[c.strip().strip("`") for c in line.strip().strip("|").split("|")] for line in block.splitlines()]
    assert len(rows) > 2 and set(rows[1][0]) <= set("-:")
    return rows[2:]


def _gpu_parts(trace: Trace) -> int:
    """(pid, device) pairs that ran GPU work, counted from the events table."""
    gpu = trace.events.filter(pl.col("kind").is_in(GPU_EVENT_KINDS) & pl.col("device").is_not_null())
    return gpu.select("pid", "device").unique().height


@pytest.mark.parametrize("row", _table("formats"), ids=lambda r: r[0])
def test_each_format_loads(row: list[str]) -> None:
    path = DATA / "traces" / row[2]
    traces = load_traces(path)
    assert traces and all(t.has_gpu_events for t in traces)
    # one Trace per rank: a folder's files, or the GPU processes of one Nsight export (the same rule as the analysis)
    several = path.is_dir() or (path.suffix == ".sqlite" and _gpu_parts(load_trace(path)) > 1)
    assert (len(traces) > 1) == several


@pytest.mark.parametrize("row", _table("rank-names"), ids=lambda r: r[0][:40])
def test_rank_from_each_file_name(row: list[str]) -> None:
    assert rank_from_name(row[0]) == int(row[2])


def test_front_end_trace_is_set_aside_and_folders_list_every_format(tmp_path: Path) -> None:
    names = [r[0] for r in _table("rank-names")]
    for name in [*names, "x.async_llm.1731000000000000000.pt.trace.json.gz"]:
        (tmp_path / name).write_bytes(b"")
    files, frontend = list_trace_files(tmp_path)
    assert sorted(p.name for p in files) == sorted(names)
    assert [p.name for p in frontend] == ["x.async_llm.1731000000000000000.pt.trace.json.gz"]


@pytest.mark.parametrize("row", _table("step-labels"), ids=lambda r: r[0][:40])
def test_each_step_label(row: list[str]) -> None:
    label, _, kind, batch, tokens = row
    parsed = parse_step_label(label)
    if kind == "not recognised":
        assert parsed is None
        return
    assert parsed is not None and parsed.kind == kind
    assert parsed.batch_size == (None if batch == "–" else int(batch))
    assert parsed.tokens == (None if tokens == "–" else int(tokens))


def test_python_stacks_are_not_needed() -> None:
    """The page says stacks are dropped: names only python_function events carry leave no rows."""
    path = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
    raw = raw_events(path)
    stack_only = ({e["name"] for e in raw if e.get("cat") == "python_function"}
                  - {e.get("name") for e in raw if e.get("cat") != "python_function"})
    assert len(stack_only) > 100
    events = load_traces(path)[0].events
    assert events.height > 0 and not events["name"].is_in(sorted(stack_only)).any()
    assert analyze_trace(path).ranks[0].steps[0].kind == "prefill"
