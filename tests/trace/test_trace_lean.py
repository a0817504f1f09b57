"""Work and memory proportional to what is kept (issue 21 parts 2 and 4): names held once per distinct value, rows
in order not copied by the sort, names beyond a ceiling cut with a warning, classification bounded per name, a
long last event and a lone huge event read in time linear in their size, and export's layout of the JSON text.

Expected values come from the raw JSON (stdlib) or from lengths and counts written by the test itself."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import msgspec
import pytest
from polars.testing import assert_frame_equal

from bench_scripts import bench_script
from independent import DATA, raw_events
from servescope.analysis.classify import MAX_CLASSIFIED_CHARS, classify_name
from servescope.trace import _frame, _read, load_trace
from servescope.trace.load import json_blocks, load_trace_and_layout

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


def test_classification_reads_a_name_up_to_the_ceiling_only() -> None:
    padded = "x" * (MAX_CLASSIFIED_CHARS - len("ncclDevKernel_AllReduce_Sum")) + "ncclDevKernel_AllReduce_Sum"
    assert classify_name(padded) == ("communication", "all_reduce")
    assert classify_name("x" + padded) == ("other", None)
    start = time.perf_counter()
    assert classify_name("y" * 50_000_000 + "_AllReduce") == ("other", None)  # was ~60 s: every rule scanned it
    assert time.perf_counter() - start < 0.5


def test_a_long_last_event_closes_in_linear_time(tmp_path: Path) -> None:
    """The array's end is searched for from `}`, not from every byte: 16 MB in the last event loads in ~0.2 s."""
    path = _trace(tmp_path / "t.json", ["a", "n" * (16 << 20)])
    start = time.perf_counter()
    trace = load_trace(path)
    assert time.perf_counter() - start < 1.5
    assert trace.events.height == 2 and trace.events["name"][1].endswith(_frame.CUT_MARK)


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
