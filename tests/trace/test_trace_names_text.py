"""Tests for the loader's name column when names rarely repeat (trace._frame._name_codes, issue 30.2): a chunk whose
names are mostly distinct keeps them as text instead of codes into a dict of every name, and the table is the same
as with codes everywhere, whether every chunk, some or none take the text path.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from servescope.trace import _frame, _split, load_trace


def _write(path: Path, seed: int) -> Path:
    rng = random.Random(seed)
    events: list[dict[str, object]] = []
    for i in range(1500):  # distinct Inductor names, then the repeated few, then distinct again
        events.append({"ph": "X", "cat": "kernel", "name": f"triton_poi_fused_add_{i}", "pid": 0, "tid": 7,
                       "ts": rng.randrange(10**6), "dur": 1 + i % 7, "args": {"correlation": i, "stream": 7}})
    for i in range(1500):
        name = ["gemv2T_kernel", "rms_norm_kernel", "triton_poi_fused_add_3", "Memcpy DtoD"][i % 4]
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 8, "ts": rng.randrange(10**6),
                       "dur": 2, "args": {"correlation": 5000 + i, "stream": 8}})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                       "ts": rng.randrange(10**6), "dur": 3})
    for i in range(1500):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": f"launch_{i % 700}", "pid": 1, "tid": 1,
                       "ts": rng.randrange(10**6), "dur": 1, "args": {"correlation": i}})
    events.append({"ph": "X", "cat": "kernel", "name": 7, "pid": 0, "tid": 7, "ts": 5, "dur": 1})  # damage: a number
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("seed", [1, 2])
def test_text_chunks_give_the_table_of_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    path = _write(tmp_path / "t.json", seed)
    monkeypatch.setattr(_split, "CHUNK_BYTES", 32 << 10)  # many chunks: some text, some codes
    monkeypatch.setattr(_split, "BLOCK_BYTES", 32 << 10)
    monkeypatch.setattr(_frame, "TEXT_MIN_ROWS", 10**9)
    coded = load_trace(path)
    monkeypatch.setattr(_frame, "TEXT_MIN_ROWS", 64)
    calls: list[pl.DataType] = []
    real = _frame._name_codes

    def spy(*args: object) -> pl.Series:
        out = real(*args)  # type: ignore[arg-type]
        calls.append(out.dtype)
        return out

    monkeypatch.setattr(_frame, "_name_codes", spy)
    mixed = load_trace(path)
    assert pl.Utf8 in calls and pl.UInt32 in calls  # both paths taken in one load
    assert_frame_equal(mixed.events, coded.events)
    assert mixed.warnings == coded.warnings
    assert "7" in mixed.events["name"].to_list()


def test_every_chunk_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "d.json"
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 3000 - i, "dur": 1,
               "args": {"correlation": i}} for i in range(3000)]
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(_frame, "TEXT_MIN_ROWS", 10**9)
    coded = load_trace(path).events
    monkeypatch.setattr(_frame, "TEXT_MIN_ROWS", 16)
    text = load_trace(path).events
    assert_frame_equal(text, coded)
    assert text["name"].to_list() == [f"k{i}" for i in reversed(range(3000))]  # sorted by ts


def test_long_names_are_cut_on_the_text_path_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_frame, "MAX_NAME_CHARS", 10)
    monkeypatch.setattr(_frame, "TEXT_MIN_ROWS", 4)
    path = tmp_path / "l.json"
    events = [{"ph": "X", "cat": "kernel", "name": f"kernel_with_long_name_{i}", "pid": 0, "tid": 7, "ts": i,
               "dur": 1} for i in range(8)]
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert set(trace.events["name"].to_list()) == {"kernel_wit" + _frame.CUT_MARK}
    assert any("8 event name(s) longer than 10" in w for w in trace.warnings)
