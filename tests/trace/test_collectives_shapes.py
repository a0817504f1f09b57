"""Message size of custom / symmetric-memory all-reduce kernels from the launching op's `Input Dims`.

Expected values are computed here with stdlib gzip+json (tests/independent.py): for each
`multimem_all_reduce_kernel`, its launch (same correlation), the `symm_mem::*` op on the launch's thread
whose interval holds the launch, and the product of that op's first `Input Dims` entry × 2 bytes
(BFloat16, read from its `Input type` here by a plain dict).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest

from independent import DATA, raw_events
from servescope.analysis.breakdown import breakdown
from servescope.analysis.classify import classify
from servescope.trace import load_trace
from servescope.trace._shapes import first_tensor, is_custom_all_reduce

B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
BYTES = {"c10::BFloat16": 2}


def _symm_sizes(events: list[dict[str, Any]]) -> tuple[list[int], list[float]]:
    """(bytes, kernel µs) per multimem all-reduce kernel in time order, by plain scans."""
    launches = {
        e["args"]["correlation"]: e for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("symm_mem::")]
    kernels = sorted(
        (e for e in events if e.get("cat") == "kernel" and "multimem_all_reduce_kernel" in e["name"]),
        key=lambda e: e["ts"],
    )
    sizes = []
    for kernel in kernels:
        launch = launches[kernel["args"]["correlation"]]
        (op,) = [o for o in ops if o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"]]
        sizes.append(math.prod(op["args"]["Input Dims"][0]) * BYTES[op["args"]["Input type"][0]])
    return sizes, [k["dur"] for k in kernels]


def test_symm_mem_all_reduce_size_is_the_launching_ops_input_dims() -> None:
    sizes, durs_us = _symm_sizes(raw_events(B200))
    assert len(sizes) == 73 and set(sizes) == {888 * 2880 * 2, 5455872}  # 5.11 MB prefill, 5.46 MB other
    trace = load_trace(B200)
    rows = (
        classify(trace.events)
        .filter(pl.col("kernel_class") == "communication", pl.col("collective") == "all_reduce")
        .sort("ts_us")
    )
    assert rows["message_bytes"].to_list() == sizes
    assert set(rows["collective_source"]) == {"launch_op"}
    assert rows["group_size"].null_count() == rows.height  # the ops carry no group size
    stats = breakdown(trace).kinds[0].collectives["all_reduce"]
    assert (stats.sized_calls, stats.message_bytes_total) == (73, sum(sizes))
    assert stats.algbw_bytes_per_s == pytest.approx(sum(sizes) / (sum(durs_us) / 1e6), rel=1e-9)
    assert stats.busbw_bytes_per_s is None  # nccl-tests busbw needs the rank count


@pytest.mark.parametrize(("name", "custom"), [
    ("vllm::all_reduce", True), ("symm_mem::multimem_all_reduce_", True), ("symm_mem::two_shot_all_reduce_", True),
    ("_C_custom_ar::all_reduce", True), ("sgl_kernel::all_reduce", True), ("sglang::outplace_all_reduce", True),
    ("vllm::all_gather", False), ("symm_mem::multimem_all_gather_out", False), ("c10d::allreduce_", False),
    ("record_param_comms", False), ("aten::all_reduce", False), (None, False), (7, False),
])
def test_custom_all_reduce_names(name: object, custom: bool) -> None:
    assert is_custom_all_reduce(name) is custom


def _raw(value: Any) -> msgspec.Raw:
    """The raw JSON of `value`; `...` stands for an absent arg (an empty Raw, as the schema's default)."""
    return msgspec.Raw(json.dumps(value).encode()) if value is not ... else msgspec.Raw()


@pytest.mark.parametrize(("dims", "types", "expected", "bad"), [
    ([[888, 2880], []], ["c10::BFloat16", ""], (2557440, "c10::BFloat16"), 0),
    # _C_custom_ar::all_reduce(int fa, Tensor inp, ...): the first input is a Scalar handle
    ([[], [4, 8], [4, 8], [], []], ["Scalar", "c10::Half", "c10::Half", "Scalar", "Scalar"], (32, "c10::Half"), 0),
    ([[]], ["float"], (1, "float"), 0),  # a 0-d tensor holds one element
    ([[2**40, 2**40]], ["float"], (2**80, "float"), 0),  # beyond int64: the frame's cast nulls it
    (..., ..., (None, None), 0),  # record_shapes off: no args, no warning
    ([["888", 2880]], ["c10::BFloat16"], (None, None), 1),  # strings
    ([[[888], [2880]]], ["c10::BFloat16"], (None, None), 1),  # nested
    ([[-1, 4]], ["float"], (None, None), 1),
    ([[1.5, 4]], ["float"], (None, None), 1),
    ("[[1]]", ["float"], (None, None), 1),
    ([[4]], "float", (None, None), 1),
    ([[4]], ..., (None, None), 1),
    ([[4], [5]], ["Scalar", ""], (None, None), 1),  # no tensor input
    ([[True, 2]], ["float"], (None, None), 1),
])
def test_first_tensor_edges(dims: Any, types: Any, expected: tuple[Any, Any], bad: int) -> None:
    lost: Counter[str] = Counter()
    assert first_tensor(_raw(dims), _raw(types), lost) == expected
    assert sum(lost.values()) == bad


def _trace(tmp_path: Path, dims: Any) -> Path:
    """A vllm::all_reduce op launching one multimem kernel, with the given raw `Input Dims` text."""
    op = (
        '{"ph": "X", "cat": "cpu_op", "name": "vllm::all_reduce", "pid": 1, "tid": 1, "ts": 10, "dur": 20,'
        ' "args": {"External id": 5, "Input type": ["c10::BFloat16", ""], "Input Dims": ' + dims + "}}"
    )
    rest = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 2,
         "args": {"External id": 5, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "multimem_all_reduce_kernel<c10::BFloat16, 16>", "pid": 0, "tid": 7,
         "ts": 20, "dur": 4, "args": {"External id": 5, "device": 0, "stream": 7, "correlation": 9}},
    ]
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + op + "," + ",".join(json.dumps(e) for e in rest) + "]}")
    return path


@pytest.mark.parametrize(("dims", "size", "warned"), [
    ("[[3, 5], []]", 30, False),
    ('[["3", 5], []]', None, True),
    ("[[[3], [5]], []]", None, True),
    ("[[123456789012345678901234567890], []]", None, True),  # beyond int64
    ('"[[3, 5]]"', None, True),
    ("null", None, True),
    ("[" * 50 + "3" + "]" * 50, None, True),
])
def test_malformed_input_dims_give_no_size_and_a_warning(tmp_path: Path, dims: str, size: int | None, warned: bool) -> None:
    trace = load_trace(_trace(tmp_path, dims))
    row = classify(trace.events).filter(pl.col("kernel_class") == "communication")
    assert row["collective"].to_list() == ["all_reduce"]
    assert row["message_bytes"].to_list() == [size]
    assert any("could not be read" in w for w in trace.warnings) is warned
