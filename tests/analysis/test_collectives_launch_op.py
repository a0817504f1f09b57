"""Collectives from the launching CPU op, message sizes and nccl-tests bandwidths, on real NCCL traces.

Expected values are computed here with stdlib gzip+json (tests/independent.py): for each NCCL kernel, its
launch (same correlation), the innermost `nccl:*` op on the launch's thread whose interval holds the
launch, and the kernel's or the op's `In/Out msg nelems`, `dtype`, `Group size` args.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from independent import DATA, raw_events
from servescope.analysis.breakdown import breakdown, busbw_factor
from servescope.analysis.classify import classify
from servescope.analysis.rules import dtype_bytes, op_collective
from servescope.trace import load_trace

HTA = DATA / "traces" / "hta"
NCCL = HTA / "nccl_parser_config" / "nccl_data.json.gz"
SAMPLED = HTA / "trace_filter" / "sampled_rank-0.json.gz"
B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
# The op names of these traces and what they are (read from the names, independently of the code).
NCCL_OPS = {"nccl:all_reduce": "all_reduce", "nccl:all_to_all": "all_to_all", "nccl:_all_gather_base": "all_gather"}
BYTES = {"Float": 4, "BFloat16": 2, "Long": 8}


def _nccl_kernels(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("nccl")),
        key=lambda e: e["ts"],
    )


def _launching_nccl_op(events: list[dict[str, Any]], kernel: dict[str, Any]) -> str:
    """Name of the innermost nccl:* op around the kernel's launch, by a plain scan."""
    (launch,) = [
        e for e in events
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == kernel["args"]["correlation"]
    ]
    around = [
        e for e in events
        if e.get("ph") == "X" and e.get("tid") == launch["tid"] and e["name"].startswith("nccl:")
        and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"]
    ]
    return max(around, key=lambda e: e["ts"])["name"]


def _comm_rows(path: Path) -> pl.DataFrame:
    events = classify(load_trace(path).events)
    return events.filter(pl.col("kernel_class") == "communication").sort("ts_us")


def test_send_recv_kernels_take_the_collective_of_their_launching_op() -> None:
    """HTA's sampled DLRM rank: every kernel is ncclKernel_SendRecv_*, the launch's External id is its
    correlation (old Kineto), so the op is found by time on the launch's thread."""
    events = raw_events(SAMPLED)
    expected = [NCCL_OPS[_launching_nccl_op(events, k)] for k in _nccl_kernels(events)]
    assert set(expected) == {"all_reduce", "all_to_all", "all_gather"}
    rows = _comm_rows(SAMPLED)
    assert rows["collective"].to_list() == expected
    assert set(rows["collective_source"]) == {"launch_op"}
    assert rows["message_bytes"].null_count() == rows.height  # this PyTorch wrote no msg-size args


def test_kernel_args_give_message_size_and_bandwidths() -> None:
    """A100 DDP (HTA nccl_parser_config): NCCL kernels carry Collective name, nelems, dtype, Group size."""
    kernels = _nccl_kernels(raw_events(NCCL))
    sizes = [max(k["args"]["In msg nelems"], k["args"]["Out msg nelems"]) * BYTES[k["args"]["dtype"]] for k in kernels]
    rows = _comm_rows(NCCL)
    assert rows["message_bytes"].to_list() == sizes
    assert rows["group_size"].to_list() == [k["args"]["Group size"] for k in kernels]
    assert set(rows["collective_source"]) == {"kernel_args"}
    (rank,) = [breakdown(load_trace(NCCL))]
    (kind,) = rank.kinds
    for collective, token in (("all_reduce", "AllReduce"), ("broadcast", "Broadcast")):
        mine = [(s, k) for s, k in zip(sizes, kernels, strict=True) if token in k["name"]]
        total_bytes = sum(s for s, _ in mine)
        seconds = sum(k["dur"] for _, k in mine) / 1e6
        n = mine[0][1]["args"]["Group size"]
        factor = 2 * (n - 1) / n if collective == "all_reduce" else 1.0
        stats = kind.collectives[collective]
        assert stats.sized_calls == stats.calls == len(mine)
        assert stats.message_bytes_total == total_bytes
        assert stats.algbw_bytes_per_s == pytest.approx(total_bytes / seconds, rel=1e-9)
        assert stats.busbw_bytes_per_s == pytest.approx(total_bytes * factor / seconds, rel=1e-9)


def _mutated(tmp_path: Path, rename_to: str) -> Path:
    """nccl_data with every NCCL kernel renamed and stripped of its collective args, so only the
    launching record_param_comms op (External id chain) can tell what it is and how big."""
    with gzip.open(NCCL, "rt") as fh:
        doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            e["name"] = rename_to
            for key in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                        "Process Group Name"):
                e["args"].pop(key, None)
    out = tmp_path / "generic.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("rename_to", [
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",  # NCCL >= 2.19 / RCCL generic kernel
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",  # name says otherwise
])
def test_generic_kernels_get_collective_and_size_from_record_param_comms(tmp_path: Path, rename_to: str) -> None:
    kernels = _nccl_kernels(raw_events(NCCL))
    rows = _comm_rows(_mutated(tmp_path, rename_to))
    expected = ["all_reduce" if "AllReduce" in k["name"] else "broadcast" for k in kernels]
    assert rows["collective"].to_list() == expected
    assert set(rows["collective_source"]) == {"launch_op"}
    sizes = [max(k["args"]["In msg nelems"], k["args"]["Out msg nelems"]) * BYTES[k["args"]["dtype"]] for k in kernels]
    assert rows["message_bytes"].to_list() == sizes
    assert rows["group_size"].to_list() == [2] * len(kernels)


def test_vllm_custom_all_reduce_op_and_nccl_all_gather() -> None:
    """B200 vLLM TP=8: multimem kernels under symm_mem::multimem_all_reduce_; one NCCL all-gather whose
    args give 201,088 BFloat16 elements out of 8 ranks."""
    events = raw_events(B200)
    (ag,) = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllGather")]
    n_multimem = sum(1 for e in events if e.get("cat") == "kernel" and "multimem_all_reduce_kernel" in e["name"])
    rows = _comm_rows(B200)
    assert rows.filter(pl.col("collective") == "all_reduce").height == n_multimem
    gather = rows.filter(pl.col("collective") == "all_gather")
    size = ag["args"]["Out msg nelems"] * 2
    assert gather["message_bytes"].to_list() == [size]
    stats = breakdown(load_trace(B200)).kinds[0].collectives["all_gather"]
    assert stats.algbw_bytes_per_s == pytest.approx(size / (ag["dur"] / 1e6), rel=1e-9)
    assert stats.busbw_bytes_per_s == pytest.approx(stats.algbw_bytes_per_s * 7 / 8, rel=1e-12)


@pytest.mark.parametrize(("n", "all_reduce", "gather_like", "one"), [(1, 0.0, 0.0, 1.0), (2, 1.0, 0.5, 1.0), (8, 1.75, 0.875, 1.0)])
def test_busbw_factors_are_nccl_tests(n: int, all_reduce: float, gather_like: float, one: float) -> None:
    assert busbw_factor("all_reduce", n) == all_reduce
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        assert busbw_factor(c, n) == gather_like
    for c in ("broadcast", "reduce", "send_recv"):
        assert busbw_factor(c, n) == one
    assert busbw_factor("barrier", n) is None
    assert busbw_factor("all_reduce", 0) is None


@pytest.mark.parametrize(("name", "collective"), [
    # real op names and Collective name args (hta/*, tracelens/b200)
    ("nccl:all_reduce", "all_reduce"), ("nccl:_all_gather_base", "all_gather"), ("nccl:all_to_all", "all_to_all"),
    ("nccl:_reduce_scatter_base", "reduce_scatter"), ("nccl:broadcast", "broadcast"), ("c10d::allreduce_", "all_reduce"),
    ("c10d::alltoall_base_", "all_to_all"), ("c10d::_allgather_base_", "all_gather"), ("c10d::broadcast_", "broadcast"),
    ("vllm::all_reduce", "all_reduce"), ("symm_mem::multimem_all_reduce_", "all_reduce"), ("vllm::all_gather", "all_gather"),
    ("allreduce", "all_reduce"), ("_allgather_base", "all_gather"), ("broadcast", "broadcast"),
    # PyTorch c10d names (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp record_param_comms names)
    ("send", "send_recv"), ("recv", "send_recv"), ("reduce", "reduce"), ("all_to_allv", "all_to_all"),
    ("reduce_scatter_tensor_coalesced", "reduce_scatter"), ("barrier", None), ("gather", None), ("", None), (None, None),
])
def test_op_collective_names(name: str | None, collective: str | None) -> None:
    assert op_collective(name) == collective


def test_dtype_bytes() -> None:
    assert [dtype_bytes(d) for d in ("Float", "BFloat16", "c10::BFloat16", "Long", "Byte", "Float8_e4m3fn")] == [
        4, 2, 2, 8, 1, 1]
    assert dtype_bytes("Quaternion") is None
    assert dtype_bytes(None) is None


def _frame(rows: list[tuple[str, str, float, float, str, int | None, int | None]]) -> pl.DataFrame:
    cols = ("kind", "name", "ts_us", "dur_us", "tid", "correlation", "external_id")
    return pl.DataFrame([dict(zip(cols, r, strict=True)) for r in rows]).with_columns(
        pl.lit("1").alias("pid"), pl.col("correlation").cast(pl.Int64), pl.col("external_id").cast(pl.Int64))


def test_sibling_op_that_ended_does_not_claim_a_later_launch() -> None:
    """Edge: a kernel launched after an nccl:all_reduce op ended, on the same thread, keeps its name's
    collective; a launch on another thread is not claimed by an op of this one."""
    frame = _frame([
        ("user_annotation", "nccl:all_reduce", 0.0, 10.0, "7", None, 1),
        ("runtime", "cudaLaunchKernel", 5.0, 1.0, "7", 100, 1),
        ("runtime", "cudaLaunchKernel", 20.0, 1.0, "7", 101, 2),
        ("runtime", "cudaLaunchKernel", 6.0, 1.0, "8", 102, 3),
        ("kernel", "ncclDevKernel_AllGather_RING_LL(x)", 30.0, 5.0, "9", 100, 1),
        ("kernel", "ncclDevKernel_AllGather_RING_LL(x)", 40.0, 5.0, "9", 101, 2),
        ("kernel", "ncclDevKernel_Generic(x)", 50.0, 5.0, "9", 102, 3),
    ])
    rows = classify(frame).filter(pl.col("kind") == "kernel")
    assert rows["collective"].to_list() == ["all_reduce", "all_gather", None]
    assert rows["collective_source"].to_list() == ["launch_op", "name", None]


def test_trace_json_and_text_show_size_and_bandwidth() -> None:
    """The JSON document carries the per-collective size and bandwidths; the terminal table shows them in GB/s."""
    from click.testing import CliRunner

    from servescope.cli import main

    (ag,) = [e for e in raw_events(B200) if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllGather")]
    size = ag["args"]["Out msg nelems"] * 2
    doc = json.loads(CliRunner().invoke(main, ["trace", str(B200), "--json"]).stdout)
    gather = doc["ranks"][0]["by_kind"][0]["collectives"]["all_gather"]
    assert (gather["sized_calls"], gather["message_bytes_total"], gather["group_size"]) == (1, size, 8)
    assert gather["algbw_bytes_per_s"] == pytest.approx(size / (ag["dur"] / 1e6), abs=1.0)
    assert gather["busbw_bytes_per_s"] == pytest.approx(size * 7 / 8 / (ag["dur"] / 1e6), abs=1.0)
    all_reduce = doc["ranks"][0]["by_kind"][0]["collectives"]["all_reduce"]
    # sized from the symm_mem op's Input Dims (test_collectives_shapes.py); no group size, so no busbw
    assert all_reduce["algbw_bytes_per_s"] is not None and all_reduce["busbw_bytes_per_s"] is None
    text = CliRunner().invoke(main, ["trace", str(B200)], terminal_width=200).output
    assert "busbw" in text and "algbw" in text
    (line,) = [x for x in text.splitlines() if "all_gather" in x and "│" in x]
    assert f"{size / 1e3:.1f} kB" in line and f"{size * 7 / 8 / (ag['dur'] / 1e6) / 1e9:.1f}" in line


def test_collective_args_stay_on_their_rows_when_the_loader_drops_and_sorts(tmp_path: Path) -> None:
    """Edge: events without a timestamp are dropped and rows are sorted; the args must follow their event."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Generic(x)", "ts": 30, "dur": 2,
         "args": {"Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": 8, "Group size": 4,
                  "dtype": "BFloat16", "Process Group Name": "7", "correlation": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "no time", "ts": None, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 10, "dur": 5,
         "args": {"Collective name": "broadcast", "In msg nelems": 3, "Group size": 2, "dtype": "Float"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 1},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    frame = load_trace(path).events
    assert frame["name"].to_list() == ["aten::mm", "record_param_comms", "ncclDevKernel_Generic(x)"]
    assert frame["comm_name"].to_list() == [None, "broadcast", "allreduce"]
    assert frame["comm_in_nelems"].to_list() == [None, 3, 8]
    assert frame["comm_out_nelems"].to_list() == [None, None, 8]
    assert frame["comm_group_size"].to_list() == [None, 2, 4]
    assert frame["comm_dtype"].to_list() == [None, "Float", "BFloat16"]
    assert frame["comm_pg"].to_list() == [None, None, "7"]
    kernel = classify(frame).filter(pl.col("kind") == "kernel")
    assert kernel.select("collective", "message_bytes", "group_size").row(0) == ("all_reduce", 16, 4)


def test_one_rank_all_reduce_has_zero_bus_bandwidth_and_unsized_calls_none() -> None:
    """Edge: nccl-tests gives busbw 0 for a 1-rank all-reduce (factor 2(n-1)/n = 0); calls without a size
    leave both bandwidths unknown."""
    from servescope.analysis._step_stats import step_collectives as _collectives

    gpu = pl.DataFrame({
        "step": [0, 0, 1], "collective": ["all_reduce", "all_reduce", "broadcast"], "dur_us": [2.0, 2.0, 5.0],
        "message_bytes": [1000, 3000, None], "group_size": [1, 1, None],
    })
    stats = _collectives(gpu)
    ar = stats[0]["all_reduce"]
    assert ar.algbw_bytes_per_s == pytest.approx(4000 / 4e-6)
    assert ar.busbw_bytes_per_s == 0.0
    assert (ar.sized_calls, ar.message_bytes_total, ar.message_bytes_median) == (2, 4000, 2000.0)
    bc = stats[1]["broadcast"]
    assert (bc.sized_calls, bc.algbw_bytes_per_s, bc.busbw_bytes_per_s, bc.group_size) == (0, None, None, None)
