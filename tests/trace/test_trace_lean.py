"""Work and memory proportional to what is kept (issue 21 parts 2 and 4): names held once per distinct value, rows
in order not copied by the sort, names beyond a ceiling cut with a warning, classification bounded per name, a
long last event and a lone huge event read with work linear in their size, and export's layout of the JSON text.

Expected values come from the raw JSON (stdlib) or from lengths and counts written by the test itself. Work is
asserted as work (characters the rules read, bytes the splitter searches), never as seconds: the time budgets are in
bench/bench_budgets.py."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import msgspec
import pytest
from polars.testing import assert_frame_equal

from bench_scripts import bench_script
from independent import DATA, raw_events
from servescope.analysis import classify
from servescope.analysis.classify import MAX_CLASSIFIED_CHARS, classify_name
from servescope.trace import _frame, _read, _split, load_trace
from servescope.trace.load import json_blocks, load_trace_and_layout
from work_counters import count_split_work

SMALL = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
KERNEL = '{{"ph":"X","cat":"kernel","name":{name},"ts":{ts},"dur":2,"pid":0,"tid":7,"args":{{"device":0}}}}'


def _trace(path: Path, names: list[str]) -> Path:
    events = ",".join(KERNEL.format(name=json.dumps(n), ts=10 * i) for i, n in enumerate(names))
    path.write_text('{"traceEvents": [' + events + "]}")
    return path


def test_generated_many_kernel_trace_is_deterministic_and_loads(tmp_path: Path) -> None:
    make = bench_script("make_many_kernels")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        with path.open("w") as fh:
            make.write(fh, 10_000)
    assert a.read_bytes() == b.read_bytes()
    raw = raw_events(a)
    kernels = [e for e in raw if e["cat"] == "kernel"]
    steps = -(-10_000 // make.STEP_KERNELS)
    assert (len(kernels), len(raw)) == (10_000, 10_000 + 2 * steps)
    events = load_trace(a).events
    assert events.height == len(raw)
    assert events["name"].to_list() == [e["name"] for e in sorted(raw, key=lambda e: e["ts"])]


def test_names_come_back_from_their_codes(tmp_path: Path) -> None:
    """Names are codes until the sort: repeated, null and numeric ones (1 and 1.0 are one dict key) as written."""
    names = ["k" * 1000, "x", "k" * 1000] * 3000 + [1, 1.0, "1", None, 2.5]
    path = tmp_path / "t.json"
    events = ",".join(KERNEL.format(name=json.dumps(n), ts=10 * i) for i, n in enumerate(names))
    path.write_text('{"traceEvents": [' + events + "]}")
    got = load_trace(path).events["name"].to_list()
    assert got == ["k" * 1000, "x", "k" * 1000] * 3000 + ["1", "1.0", "1", "(no name)", "2.5"]


def test_rows_already_in_order_are_not_gathered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _trace(tmp_path / "t.json", ["a", "b", "c"])
    calls: list[bool] = []
    real = _frame._gathered
    monkeypatch.setattr(_frame, "_gathered", lambda columns, order: calls.append(order is None) or real(columns, order))
    assert load_trace(path).events["name"].to_list() == ["a", "b", "c"]
    assert calls == [True]


def test_a_name_past_the_ceiling_is_cut_with_a_warning(tmp_path: Path) -> None:
    long_name = "ab" * _frame.MAX_NAME_CHARS
    trace = load_trace(_trace(tmp_path / "t.json", ["short", long_name, long_name]))
    names = trace.events["name"].to_list()
    assert names[0] == "short"
    assert names[1] == names[2] == long_name[: _frame.MAX_NAME_CHARS] + _frame.CUT_MARK
    assert any(w.startswith("2 event name(s) longer than 65,536 characters cut") for w in trace.warnings)


class _Recorded:
    """A compiled rule that records the length of every string it searches."""

    def __init__(self, pattern: re.Pattern[str], read: list[int]) -> None:
        self.pattern, self.read = pattern, read

    def search(self, text: str) -> re.Match[str] | None:
        self.read.append(len(text))
        return self.pattern.search(text)


def test_classification_reads_a_name_up_to_the_ceiling_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No rule reads more than MAX_CLASSIFIED_CHARS characters; a name over 4x that is not read at all (a 50 MB
    name took ~60 s when every rule scanned it). Uncached calls (`__wrapped__`): each one does its work."""
    read: list[int] = []
    heads: list[int] = []
    monkeypatch.setattr(classify, "_COMPILED", tuple((_Recorded(p, read), k, c) for p, k, c in classify._COMPILED))
    real_head = classify.name_head
    monkeypatch.setattr(classify, "name_head", lambda name: heads.append(len(name)) or real_head(name))
    uncached = classify_name.__wrapped__
    padded = "x" * (MAX_CLASSIFIED_CHARS - len("ncclDevKernel_AllReduce_Sum")) + "ncclDevKernel_AllReduce_Sum"
    assert uncached(padded) == ("communication", "all_reduce")
    assert read and max(read) == MAX_CLASSIFIED_CHARS
    read.clear()
    assert uncached("x" + padded) == ("other", None)
    assert read == []  # one character past the ceiling: no rule runs
    heads.clear()
    assert uncached("y" * 50_000_000 + "_AllReduce") == ("other", None)
    assert (read, heads) == ([], [])  # past 4x the ceiling: not even the argument list is looked for


def test_a_long_last_event_closes_in_linear_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 MB in the last event: each block's search for an event end covers only the new bytes (plus one separator
    span), so the bytes searched add up to the file once, not to a sum over the growing pending bytes (2 + 4 + ... +
    16 MB = 72 MB, the quadratic splitter); the array's end is found at its first candidate, by a pattern that
    starts with the literal `}` (searched for that byte, not tried at every byte); the fast path reads it."""
    path = _trace(tmp_path / "t.json", ["a", "n" * (16 << 20)])
    work = count_split_work(monkeypatch)
    trace = load_trace(path)
    assert trace.events.height == 2 and trace.events["name"][1].endswith(_frame.CUT_MARK)
    assert len(work.searched) >= 8  # one search per 2 MB block at least: the bound below is not vacuous
    assert sum(work.searched) <= path.stat().st_size + len(work.searched) * _split.SEP_SPAN_BYTES
    assert (work.closes, work.whole_reads) == (1, 0)
    assert _split._ARRAY_END.pattern.startswith(rb"\}")


def test_empty_event_arrays_still_read_as_empty(tmp_path: Path) -> None:
    from servescope.errors import EmptyTrace

    for text in ('{"traceEvents": []}', '{"traceEvents": [ \n ], "x": "]"}', "[ ]"):
        path = tmp_path / "e.json"
        path.write_text(text)
        with pytest.raises(EmptyTrace):
            load_trace(path)


def test_a_lone_huge_event_decodes_like_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact path decodes an event over LONE_EVENT_BYTES from its own slice (no copy): same table, also for
    a lone event of a type msgspec's typed decode refuses (an `args` list: the untyped path)."""
    path = _trace(tmp_path / "t.json", ["a", "b" * 300, "c", "d" * 300, "e" * 300])
    path.write_text(path.read_text().replace('"args":{"device":0}}]', '"args":[1]}]'))
    w: list[str] = []
    normal = _read.decode(path, _read.read_bytes(path, w), w, try_fast=False)
    monkeypatch.setattr(_read, "LONE_EVENT_BYTES", 200)  # the three long events come alone
    lone = _read.decode(path, _read.read_bytes(path, w), w, try_fast=False)
    assert lone.n_events == normal.n_events
    assert_frame_equal(_frame.finish_events(lone.parts, {}, lone.lost, [])[0],
                       _frame.finish_events(normal.parts, {}, normal.lost, [])[0])


def test_layout_points_after_the_array_bracket(tmp_path: Path) -> None:
    for path in (SMALL, _trace(tmp_path / "plain.json", ["a", "b"])):
        trace, layout = load_trace_and_layout(path)
        text = b"".join(bytes(b) for b in json_blocks(path))
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        assert text == raw
        assert layout is not None and layout.n_events == len(raw_events(path))
        head = text[: layout.array_start]
        assert head.endswith(b"[") and msgspec.json.decode(head + b"]}")["traceEvents"] == []
