"""The breakdown on GPU rows held apart (issue 21 part 2): the split keeps every row once, the lean classification,
step attribution and breakdown give what the full-table ones give, and a breakdown handed its trace frees it.

Row counts are checked against stdlib json (independent.gpu_events); the lean paths against the full-table paths
they replace (classify on every row, find_steps on the whole table), which other tests check against raw data."""

from __future__ import annotations

import gc
import json
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from independent import DATA, gpu_events, raw_events
from servescope.analysis.breakdown import breakdown, breakdown_taking
from servescope.analysis.classify import SOURCES, classify, classify_gpu
from servescope.analysis.gpu_rows import GPU_COLUMNS, OTHER_COLUMNS, split_events, take_split
from servescope.analysis.steps import find_steps
from servescope.trace import load_trace
from servescope.trace.types import GPU_EVENT_KINDS

TRACES = DATA / "traces"
NCCL = TRACES / "hta" / "nccl_parser_config" / "nccl_data.json.gz"  # collectives with args, launch ops
DECODE = TRACES / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"  # graph replays
NO_LABELS = TRACES / "kineto" / "docs_traces" / "before_fix_trace.json"  # steps from idle gaps


@pytest.fixture(scope="module", params=[NCCL, DECODE, NO_LABELS], ids=["nccl", "decode", "gaps"])
def events(request: pytest.FixtureRequest) -> pl.DataFrame:
    return load_trace(request.param).events


def test_split_keeps_each_row_once_with_its_columns() -> None:
    table = load_trace(NCCL).events
    gpu, others = split_events(table)
    raw = raw_events(NCCL)
    assert gpu.height == len(gpu_events(raw))
    assert gpu.height + others.height == table.height
    assert gpu.columns == [c for c in table.columns if c in GPU_COLUMNS]
    assert others.columns == [c for c in table.columns if c in OTHER_COLUMNS]
    assert_frame_equal(gpu, table.filter(pl.col("kind").is_in(GPU_EVENT_KINDS)).select(gpu.columns))
    holder = [table]
    taken = take_split(holder)
    assert holder == []
    assert_frame_equal(taken[0], gpu)
    assert_frame_equal(taken[1], others)


def test_classify_gpu_is_classify_on_the_gpu_rows(events: pl.DataFrame) -> None:
    gpu, others = split_events(events)
    lean = classify_gpu(gpu, others)
    full = classify(events).filter(pl.col("kind").is_in(GPU_EVENT_KINDS)).select(lean.columns)
    assert lean.schema["collective_source"] == SOURCES  # the same values, as an Enum (one byte a row, not 16)
    assert_frame_equal(lean.with_columns(pl.col("collective_source").cast(pl.Utf8)), full)


def test_find_steps_on_given_gpu_rows_is_find_steps(events: pl.DataFrame) -> None:
    gpu, others = split_events(events)
    lean = find_steps(others, gpu=classify_gpu(gpu, others))
    full = find_steps(classify(events))
    assert_frame_equal(lean.steps, full.steps)
    assert lean.method == full.method
    assert_frame_equal(lean.gpu_events.with_columns(pl.col("collective_source").cast(pl.Utf8)),
                       full.gpu_events.select(lean.gpu_events.columns), check_row_order=False)
    assert_frame_equal(lean.launches, full.launches.select(lean.launches.columns), check_row_order=False)


@pytest.mark.parametrize("path", [DECODE], ids=["decode"])
def test_a_breakdown_handed_its_trace_frees_the_table_and_gives_the_same(path: Path) -> None:
    expected = breakdown(load_trace(path))
    traces = [load_trace(path)]
    table = weakref.ref(traces[0].events)
    got = breakdown_taking(traces)
    gc.collect()
    assert traces == [] and table() is None
    assert _rounded(asdict(got)) == _rounded(asdict(expected))


def _rounded(value: Any) -> Any:
    """Floats to 10 significant digits: Polars' parallel group sums may add in another order run to run."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


CONTROL = TRACES / "hta" / "trace_diff" / "control" / "control.json.gz"  # record_shapes: 882 shaped kernels


@pytest.mark.parametrize("path", [NCCL, CONTROL], ids=["nccl", "shapes"])
def test_enum_text_and_chunked_work_give_the_breakdown_of_plain_text(path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The breakdown's compact columns (text as sorted Enums) and work attached in chunks (an op's kernels kept
    together) change no number and no order: the same breakdown as plain text and one attach_work call."""
    from servescope.analysis import breakdown as module
    from servescope.analysis import gpu_rows

    lean = breakdown(load_trace(path))  # one attach_work call: fewer rows than a chunk
    monkeypatch.setattr(module, "compact", lambda gpu: gpu)
    monkeypatch.setattr(gpu_rows, "WORK_CHUNK_ROWS", 2500)  # a few chunks
    plain_chunked = breakdown(load_trace(path))
    assert _rounded(asdict(lean)) == _rounded(asdict(plain_chunked))


def test_chunked_work_counts_malformed_dims_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from servescope.analysis import gpu_rows

    events = []
    for i, dims in enumerate([[[64, 128], [128, 256]], [[-64, 128], [128, 256]], [[64, "x"], [1, 2]]] * 4):
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i, "dur": 50,
             "args": {"External id": i + 1, "Input Dims": dims, "Input type": ["c10::BFloat16"] * 2}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 100 * i + 10,
             "dur": 5, "args": {"External id": i + 1, "correlation": 1000 + i}},
            {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 100 * i + 20, "dur": 10,
             "args": {"correlation": 1000 + i, "device": 0, "stream": 7}},
        ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(gpu_rows, "WORK_CHUNK_ROWS", 3)
    (warning,) = [w for w in breakdown(load_trace(path)).warnings if "malformed Input Dims" in w]
    assert warning.startswith("8 kernels (80.0 µs) launched by 8 ops")  # 2 of every 3 ops, 10 µs a kernel


def test_no_gpu_row_in_any_step(tmp_path: Path) -> None:
    """A step label with every kernel launched outside it: no union over no rows (an empty frame crashed)."""
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": ['
                    '{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":10},'
                    '{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":50,"dur":1,'
                    '"args":{"correlation":7}},'
                    '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":60,"dur":5,'
                    '"args":{"correlation":7,"device":0,"stream":7}}]}')
    b = breakdown(load_trace(path))
    assert [s.gpu_busy_us for s in b.steps] == [0.0]
    assert b.outside_steps_events == 1
