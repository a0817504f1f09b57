"""Tests for servescope.trace (load_trace / load_traces).

Expected values are computed here with the stdlib (gzip + json), never copied from loader output.
Real traces come from tests/data/traces (provenance in tests/data/README.md); damaged and odd traces
are generated in the test from them or written inline.
"""

from __future__ import annotations

import gc
import gzip
import json
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servescope.errors import EmptyTrace, NotATrace, ServescopeError, TraceNotFound
from servescope.trace import DeviceInfo, Trace, load_trace, load_traces
from servescope.trace.folder import rank_from_name

TRACES = Path(__file__).parents[1] / "data" / "traces"
B200 = TRACES / "tracelens/b200/eager_trace.json.gz"
NS_TRACE = TRACES / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
OLD_2021 = TRACES / "kineto/tb_plugin_samples/worker0.1623143089861.pt.trace.json.gz"
OLD_FLOW = TRACES / "hta/trace_file_list/inference_rank_1.json.gz"
NEWEST = TRACES / "kineto/docs_traces/before_fix_trace.json"
ROCM = TRACES / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
SGLANG = TRACES / "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
CPU_ONLY = TRACES / "hta/distributed_info_unavailable/distributed_info_not_found.json.gz"
SAMPLED = TRACES / "hta/trace_filter"
CHECKED_ELSEWHERE = {B200, NS_TRACE, OLD_2021, SGLANG}

CONTRACT = {
    "kind": pl.Utf8,
    "name": pl.Utf8,
    "ts_us": pl.Float64,
    "dur_us": pl.Float64,
    "pid": pl.Utf8,
    "tid": pl.Utf8,
    "device": pl.Int64,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "grid_blocks": pl.Int64,
    "block_threads": pl.Int64,
    "blocks_per_sm": pl.Float64,
    "comm_name": pl.Utf8,
    "comm_in_nelems": pl.Int64,
    "comm_out_nelems": pl.Int64,
    "comm_group_size": pl.Int64,
    "comm_dtype": pl.Utf8,
    "comm_pg": pl.Utf8,
    "op_input_dims": pl.Utf8,  # record_shapes args of the ops with a cost model (issue 19)
    "op_input_types": pl.Utf8,
    "gpu_bytes": pl.Int64,  # args.bytes of memcpy/memset rows
}
KINDS = {
    "kernel",
    "memcpy",
    "memset",
    "runtime",
    "driver",
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "sync",
    "other",
}


# ---------------------------------------------------------------- independent stdlib helpers


def raw_doc(path: Path) -> Any:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def kept_raw(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the table must hold: complete events except python_function."""
    return [e for e in events if e.get("ph") == "X" and e.get("cat") != "python_function"]


def write(path: Path, doc: Any, *, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(ts: float, **args: Any) -> dict[str, Any]:
    base = {"device": 0, "stream": 7, "correlation": 1, "grid": [4, 2, 1], "block": [128, 1, 1]}
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 2.0,
            "args": {**base, **args}}  # fmt: skip


@pytest.fixture(scope="module")
def b200_raw() -> dict[str, Any]:
    return raw_doc(B200)


@pytest.fixture(scope="module")
def b200() -> Trace:
    return load_trace(B200)


# ---------------------------------------------------------------- contract on the B200 trace


def test_schema_matches_contract(b200: Trace) -> None:
    assert dict(b200.events.schema) == CONTRACT
    assert set(b200.events["kind"].unique()) <= KINDS


def test_b200_counts_match_stdlib(b200: Trace, b200_raw: dict[str, Any]) -> None:
    kept = kept_raw(b200_raw["traceEvents"])
    assert b200.events.height == len(kept)
    n_kernels = sum(1 for e in kept if e["cat"] == "kernel")
    assert (b200.events["kind"] == "kernel").sum() == n_kernels == 768
    assert (b200.events["kind"] == "driver").sum() == sum(
        1 for e in kept if e["cat"] == "cuda_driver"
    )
    assert b200.has_gpu_events


def test_b200_sorted_durations_and_sums(b200: Trace, b200_raw: dict[str, Any]) -> None:
    ev = b200.events
    assert ev["ts_us"].is_sorted()
    assert ev["dur_us"].min() >= 0
    kernels = [e for e in b200_raw["traceEvents"] if e.get("cat") == "kernel"]
    k = ev.filter(pl.col("kind") == "kernel")
    assert k["dur_us"].sum() == pytest.approx(sum(e["dur"] for e in kernels))
    assert k["ts_us"].min() == pytest.approx(min(e["ts"] for e in kernels))


def test_b200_link_columns(b200: Trace, b200_raw: dict[str, Any]) -> None:
    kernels = [e for e in b200_raw["traceEvents"] if e.get("cat") == "kernel"]
    first = min(kernels, key=lambda e: e["ts"])
    row = b200.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert row["correlation"] == first["args"]["correlation"]
    assert row["external_id"] == first["args"].get("External id")
    assert row["device"] == first["args"]["device"]
    assert row["stream"] == first["args"]["stream"]
    g, b = first["args"]["grid"], first["args"]["block"]
    assert row["grid_blocks"] == g[0] * g[1] * g[2]
    assert row["block_threads"] == b[0] * b[1] * b[2]
    assert row["blocks_per_sm"] == pytest.approx(first["args"]["blocks per SM"])
    # CPU-side rows carry no device/stream
    cpu = b200.events.filter(pl.col("kind") == "cpu_op")
    assert cpu["device"].null_count() == cpu.height


def test_b200_devices_rank_metadata(b200: Trace, b200_raw: dict[str, Any]) -> None:
    props = b200_raw["deviceProperties"]
    assert b200.devices[0] == DeviceInfo(0, props[0]["name"], props[0]["numSms"], 2048)
    assert len(b200.devices) == len(props) == 8
    assert (b200.rank, b200.world_size) == (0, b200_raw["distributedInfo"]["world_size"])
    assert b200.metadata["displayTimeUnit"] == "ms"
    assert b200.warnings == ()


# ---------------------------------------------------------------- schema variants


def test_ns_display_unit_keeps_microseconds() -> None:
    """displayTimeUnit "ns" only changes display: ts stays µs. Proof from the data: the file name says
    Apr_03_18_51_38 (US Pacific, UTC-7), and the first ts read as µs since the epoch is that instant."""
    tr = load_trace(NS_TRACE)
    raw = kept_raw(raw_doc(NS_TRACE)["traceEvents"])
    assert tr.metadata["displayTimeUnit"] == "ns"
    t0 = datetime.fromtimestamp(tr.events["ts_us"].min() / 1e6, UTC)
    assert (t0.month, t0.day, t0.hour, t0.minute) == (4, 4, 1, 51)  # 18:51 PDT = 01:51 UTC next day
    assert tr.events["ts_us"].min() == min(e["ts"] for e in raw)
    assert tr.events.height == len(raw)
    k = tr.events.filter(pl.col("kind") == "kernel")
    assert k["dur_us"].sum() == pytest.approx(sum(e["dur"] for e in raw if e["cat"] == "kernel"))
    assert not any("ns" in w for w in tr.warnings)


def test_ns_timestamps_are_converted(tmp_path: Path) -> None:
    ev = kernel(1.7e18) | {"dur": 2500.0}
    tr = load_trace(write(tmp_path / "t.json", {"traceEvents": [ev]}))
    assert tr.events["ts_us"][0] == pytest.approx(1.7e15)
    assert tr.events["dur_us"][0] == pytest.approx(2.5)
    assert any("ns" in w for w in tr.warnings)


def test_old_2021_schema() -> None:
    tr = load_trace(OLD_2021)
    raw = kept_raw(raw_doc(OLD_2021)["traceEvents"])
    old_to_kind = {"Kernel": "kernel", "Runtime": "runtime", "Operator": "cpu_op",
                   "Memcpy": "memcpy", "Memset": "memset"}  # fmt: skip
    counts = dict(tr.events.group_by("kind").len().iter_rows())
    for cat, kind in old_to_kind.items():
        assert counts[kind] == sum(1 for e in raw if e["cat"] == cat), cat
    assert tr.rank is None  # no distributedInfo, no rank in "worker0.<ts>.pt.trace.json.gz"


def test_old_lowercase_external_id_and_rank() -> None:
    tr = load_trace(OLD_FLOW)
    raw = raw_doc(OLD_FLOW)
    assert tr.rank == raw["distributedInfo"]["rank"] == 1
    kern = [e for e in raw["traceEvents"] if e.get("cat") == "Kernel"]
    got = tr.events.filter(pl.col("kind") == "kernel").sort("ts_us")["external_id"].to_list()
    assert got == [e["args"]["external id"] for e in sorted(kern, key=lambda e: e["ts"])]


def test_newest_nested_occupancy() -> None:
    tr = load_trace(NEWEST)
    raw = [e for e in raw_doc(NEWEST)["traceEvents"] if e.get("cat") == "kernel"]
    row = tr.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert isinstance(raw[0]["args"]["occupancy"], dict)
    assert row["blocks_per_sm"] == pytest.approx(raw[0]["args"]["blocks per SM"])
    assert (tr.events["kind"] == "sync").sum() == sum(
        1 for e in raw_doc(NEWEST)["traceEvents"] if e.get("cat") == "cuda_sync"
    )


def test_rocm_without_occupancy() -> None:
    tr = load_trace(ROCM)
    raw = raw_doc(ROCM)["traceEvents"]
    k = tr.events.filter(pl.col("kind") == "kernel")
    assert k.height == sum(1 for e in raw if e.get("cat") == "kernel")
    # ROCm kernels carry neither grid nor "blocks per SM" here
    assert k["blocks_per_sm"].null_count() == k.height
    assert k["device"].to_list() == [2] * k.height
    runtime = tr.events.filter(pl.col("kind") == "runtime")["name"]
    assert runtime.str.starts_with("hip").all()
    assert tr.warnings == ()  # runtime args carry stream "0x0": not a warning


def test_blocks_per_sm_from_num_sms_when_device_unlisted() -> None:
    """SGLang MI300X trace: kernels on device 9, deviceProperties lists only id 0 (304 CUs)."""
    tr = load_trace(SGLANG)
    raw = raw_doc(SGLANG)
    n_cu = raw["deviceProperties"][0]["numSms"]
    first = min((e for e in raw["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    g = first["args"]["grid"]
    assert tr.events.height == len(kept_raw(raw["traceEvents"]))
    row = tr.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert row["blocks_per_sm"] == pytest.approx(g[0] * g[1] * g[2] / n_cu)


def test_blocks_per_sm_derived_and_absent(tmp_path: Path) -> None:
    ev = kernel(10.0)  # grid 4×2×1 = 8 blocks, no "blocks per SM"
    doc = {"deviceProperties": [{"id": 0, "name": "G", "numSms": 16}], "traceEvents": [ev]}
    tr = load_trace(write(tmp_path / "a.json", doc))
    assert tr.events["blocks_per_sm"][0] == pytest.approx(8 / 16)
    tr = load_trace(write(tmp_path / "b.json", {"traceEvents": [ev]}))
    assert tr.events["blocks_per_sm"][0] is None
    assert tr.devices == {}


def test_string_pids(tmp_path: Path) -> None:
    k = kernel(5.0)
    del k["args"]["device"], k["args"]["stream"]
    k |= {"pid": "[TP00-DP01] 3", "tid": "7"}
    events = [
        k,
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1.0, "dur": 9.0},
        {"ph": "i", "name": "Iteration Start", "pid": "Traces", "tid": "Trace", "ts": 1.0, "s": "g"},
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 20.0, "s": "g"},
    ]  # fmt: skip
    tr = load_trace(write(tmp_path / "merged.json", {"traceEvents": events}))
    assert tr.events["pid"].to_list() == ["Spans", "[TP00-DP01] 3"]
    row = tr.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert (row["device"], row["stream"]) == (3, 7)


def test_bare_list_file(tmp_path: Path) -> None:
    events = raw_doc(NEWEST)["traceEvents"]
    tr = load_trace(write(tmp_path / "bare.json", events))
    assert tr.events.height == len(kept_raw(events))
    assert tr.devices == {} and tr.rank is None


def test_missing_device_properties_and_distributed_info() -> None:
    tr = load_trace(SAMPLED / "sampled_rank-1.json.gz")
    assert "deviceProperties" not in raw_doc(SAMPLED / "sampled_rank-1.json.gz")
    assert tr.devices == {} and tr.rank == 1 and tr.world_size == 128
    cpu = load_trace(CPU_ONLY)
    assert cpu.rank is None and cpu.world_size is None
    assert not cpu.has_gpu_events  # CPU-only loads; NoGpuEvents is a later stage's decision


def test_python_function_flows_and_metadata_dropped(tmp_path: Path) -> None:
    events = [
        kernel(3.0),
        {"ph": "X", "cat": "python_function", "name": "f.py(1): g", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0},
        {"ph": "s", "cat": "ac2g", "id": 1, "name": "ac2g", "pid": 1, "tid": 1, "ts": 1.0},
        {"ph": "f", "cat": "ac2g", "id": 1, "name": "ac2g", "pid": 0, "tid": 7, "ts": 3.0, "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "x", "pid": 1, "tid": 1, "ts": 2.0},
        {"ph": "X", "cat": "overhead", "name": "Activity Buffer Request", "pid": -1, "tid": 0, "ts": 2.0, "dur": 5.0},
    ]  # fmt: skip
    tr = load_trace(write(tmp_path / "t.json", {"traceEvents": events}))
    assert tr.events["kind"].to_list() == ["other", "kernel"]


def test_negative_duration_clipped(tmp_path: Path) -> None:
    tr = load_trace(write(tmp_path / "t.json", {"traceEvents": [kernel(1.0) | {"dur": -4.0}]}))
    assert tr.events["dur_us"][0] == 0.0
    assert any("negative" in w for w in tr.warnings)


def test_gc_state_restored() -> None:
    assert gc.isenabled()
    load_trace(NEWEST)
    assert gc.isenabled()


# ---------------------------------------------------------------- errors


def test_missing_path() -> None:
    with pytest.raises(TraceNotFound, match="nope.json"):
        load_trace("/no/such/dir/nope.json")


@pytest.mark.parametrize(
    ("content", "error", "match"),
    [
        (b"hello world", NotATrace, "not JSON"),
        (b"", NotATrace, "empty"),
        (b'{"schemaVersion": 1}', NotATrace, "traceEvents"),
        (b'{"traceEvents": []}', EmptyTrace, "no events"),
        (b'[{"file": "x.json", "batch_size": 32}]', NotATrace, "no trace events"),
        (
            b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0}]}',
            EmptyTrace,
            "complete",
        ),
        (b'{"traceEvents": {"a": 1}}', NotATrace, "traceEvents"),
        (b"\x1f\x8b\x08\x00garbage", NotATrace, "gzip"),
        (b'{"traceEvents": [{"ph": "X", @@@', NotATrace, "could not be repaired"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, error: type, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(error, match=match) as info:
        load_trace(path)
    assert "bad.json" in str(info.value) and "\n" not in str(info.value)


def test_sqlite_without_nsys_tables_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    with pytest.raises(NotATrace, match="not an Nsight Systems export"):
        load_trace(path)  # Nsight exports themselves: tests/trace/test_trace_nsys.py


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(NotATrace, match="folder"):
        load_trace(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(TraceNotFound, match="no trace files"):
        load_traces(tmp_path)


@pytest.mark.parametrize(
    "path", sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz"))), ids=str
)
def test_every_copied_trace_loads_or_fails_clearly(path: Path) -> None:
    try:
        tr = load_trace(path)
    except ServescopeError as exc:
        assert str(path.name) in str(exc)
        return
    assert dict(tr.events.schema) == CONTRACT
    if path not in CHECKED_ELSEWHERE:  # big ones: counted in their own tests (parse once)
        assert tr.events.height == len(kept_raw(_events_of(raw_doc(path))))


def _events_of(doc: Any) -> list[dict[str, Any]]:
    return doc if isinstance(doc, list) else doc["traceEvents"]


# ---------------------------------------------------------------- damage and repairs


@pytest.fixture(scope="module")
def small_events(b200_raw: dict[str, Any]) -> list[dict[str, Any]]:
    """Every 16th event of the B200 trace (~1,500, all kinds): a small real trace to damage."""
    return b200_raw["traceEvents"][::16]


def _serialize(events: list[dict[str, Any]]) -> tuple[bytes, list[int]]:
    """Kineto-like bytes and the end offset of each event."""
    head = b'{"schemaVersion": 1, "traceEvents": [\n'
    ends, parts, pos = [], [head], len(head)
    for i, ev in enumerate(events):
        chunk = json.dumps(ev).encode() + (b",\n" if i < len(events) - 1 else b"\n")
        parts.append(chunk)
        pos += len(chunk)
        ends.append(pos - 2)
    parts.append(b"]}")
    return b"".join(parts), ends


def _load_bytes(tmp_path: Path, data: bytes, name: str = "damaged.json") -> Trace:
    path = tmp_path / name
    path.write_bytes(data)
    return load_trace(path)


def test_control_characters(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, _ = _serialize(small_events)
    k = data.index(b'"name": "') + len(b'"name": "')
    data = data[:k] + b"\x01\x02\t" + data[k:]
    tr = _load_bytes(tmp_path, data)
    assert tr.events.height == len(kept_raw(small_events))
    assert any("control characters" in w and "2" in w for w in tr.warnings)


def test_bare_na(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, _ = _serialize(small_events)
    data = re.sub(rb'"Ev Idx": \d+', b'"Ev Idx": N/A', data, count=3)
    data = re.sub(rb'"dur": [0-9.]+', b'"dur": NaN', data, count=1)
    tr = _load_bytes(tmp_path, data)
    assert tr.events.height == len(kept_raw(small_events))
    assert any("4 unquoted N/A" in w for w in tr.warnings)
    assert tr.events["dur_us"].null_count() == 0  # NaN → null → 0 (dur ≥ 0 in the contract)


def test_huge_integers(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    events = [dict(e) for e in small_events]
    kern_i = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    events[0] = events[0] | {"args": {**events[0]["args"], "Comms Id": 2**70}}  # skipped field
    events[kern_i] = events[kern_i] | {"args": {**events[kern_i]["args"], "correlation": 2**64 + 1}}
    tr = _load_bytes(tmp_path, _serialize(events)[0])
    assert tr.events.height == len(kept_raw(events))
    kernels = tr.events.filter(pl.col("kind") == "kernel")
    assert kernels["correlation"].null_count() == 1
    assert any("correlation" in w for w in tr.warnings)


def test_invalid_utf8(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, _ = _serialize(small_events)
    data = data.replace(b"aten::slice", b"aten::sl\xff\xfeice", 1)
    tr = _load_bytes(tmp_path, data)
    assert tr.events.height == len(kept_raw(small_events))
    assert tr.events["name"].str.contains("\ufffd").sum() == 1
    assert any("UTF-8" in w for w in tr.warnings)


def test_lone_surrogate_escape(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, _ = _serialize(small_events)
    data = data.replace(b"aten::slice", b"aten::\\udc80slice", 1)
    tr = _load_bytes(tmp_path, data)
    assert tr.events.height == len(kept_raw(small_events))
    assert any("surrogate" in w for w in tr.warnings)


def test_trailing_comma(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, _ = _serialize(small_events)
    data = data[:-3] + b",\n]}"
    tr = _load_bytes(tmp_path, data)
    assert tr.events.height == len(kept_raw(small_events))
    assert any("trailing comma" in w for w in tr.warnings)


@pytest.mark.parametrize("fraction", [0.3, 0.77])
def test_truncated_tail(
    tmp_path: Path, small_events: list[dict[str, Any]], fraction: float
) -> None:
    data, ends = _serialize(small_events)
    cut = int(len(data) * fraction)
    n_complete = sum(1 for end in ends if end < cut)
    tr = _load_bytes(tmp_path, data[:cut])
    assert tr.events.height == len(kept_raw(small_events[:n_complete]))
    assert f"truncated tail: kept {n_complete:,} events" in " ".join(tr.warnings)


def test_truncated_gzip(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, ends = _serialize(small_events)
    packed = gzip.compress(data)
    tr = _load_bytes(tmp_path, packed[: len(packed) // 2], "cut.json.gz")
    assert any("gzip stream ends early" in w for w in tr.warnings)
    assert any("truncated tail" in w for w in tr.warnings)
    assert 0 < tr.events.height < len(kept_raw(small_events))


def test_wrong_value_types_skip_only_bad_events(tmp_path: Path) -> None:
    events = [
        kernel(1.0),
        kernel(2.0) | {"args": ["not", "a", "dict"]},
        kernel(3.0) | {"pid": {"x": 1}},
    ]
    tr = _load_bytes(tmp_path, json.dumps({"traceEvents": events}).encode())
    assert tr.events["ts_us"].to_list() == [1.0, 2.0]  # args dropped for event 2, event 3 skipped
    assert any("1 events with unreadable fields" in w for w in tr.warnings)


def test_all_damage_kinds_at_once(tmp_path: Path, small_events: list[dict[str, Any]]) -> None:
    data, ends = _serialize(small_events)
    data = data.replace(b"aten::slice", b"aten::\x01sl\xffice", 1)
    data = re.sub(rb'"Ev Idx": \d+', b'"Ev Idx": N/A', data, count=1)
    cut = int(len(data) * 0.6)
    n_complete = sum(1 for end in ends if end < cut)
    tr = _load_bytes(tmp_path, data[:cut])
    assert tr.events.height == len(kept_raw(small_events[:n_complete]))
    assert len(tr.warnings) == 4


# ---------------------------------------------------------------- ranks and folders


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank3.1712195495505583000.pt.trace.json.gz", 3),
        ("dp0_pp0_tp1_dcp0_ep0_rank1.1712195495505583000.pt.trace.json.gz", 1),
        ("1712-abc-TP-3.trace.json.gz", 3),
        ("1712-abc-TP-2-DECODE.trace.json.gz", 2),
        ("rank-1.json.gz", 1),
        ("sampled_rank-1.json.gz", 1),
        ("inference_rank_1.json.gz", 1),
        ("run_tp5_x.json", 5),
        ("worker0.1623143089861.pt.trace.json.gz", None),
        ("trace.json", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_folder_of_rank_files(tmp_path: Path) -> None:
    small = {"traceEvents": raw_doc(NEWEST)["traceEvents"]}
    names = [
        "rank3.123.pt.trace.json.gz",
        "dp0_pp0_tp0_dcp0_ep0_rank1.123.pt.trace.json.gz",
        "p-TP-2-DECODE.trace.json.gz",
        "rank-0.json.gz",
    ]
    for n in names:
        write(tmp_path / n, small, gz=True)
    write(tmp_path / "host_42.async_llm.123.pt.trace.json.gz", small, gz=True)
    traces = load_traces(tmp_path)
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    assert "async_llm" in " ".join(traces[0].warnings)
    assert all("async_llm" not in t.path.name for t in traces)


def test_duplicate_distributed_ranks_fall_back_to_names(tmp_path: Path) -> None:
    doc = {"distributedInfo": {"rank": 0}, "traceEvents": [kernel(1.0)]}
    write(tmp_path / "rank1.json", doc)
    write(tmp_path / "rank0.json", doc)
    traces = load_traces(tmp_path)
    assert [(t.rank, t.path.name) for t in traces] == [(0, "rank0.json"), (1, "rank1.json")]
    assert any("file name" in w for w in traces[1].warnings)


def test_real_two_rank_folder() -> None:
    traces = load_traces(SAMPLED)
    assert [t.rank for t in traces] == [0, 1]
    for t in traces:
        raw = raw_doc(t.path)
        assert t.rank == raw["distributedInfo"]["rank"]
        assert t.events.height == len(kept_raw(raw["traceEvents"]))


def test_load_traces_on_a_file() -> None:
    [tr] = load_traces(NEWEST)
    assert tr.path == NEWEST


# ---------------------------------------------------------------- fast path (chunks cut in the bytes)


def _frame_of(path: Path) -> pl.DataFrame:
    return load_trace(path).events


@pytest.mark.parametrize(("block", "chunk"), [(7, 5), (4096, 3000), (1 << 16, 1 << 15)])
def test_small_blocks_give_the_same_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, b200: Trace, block: int, chunk: int
) -> None:
    """Streaming in tiny blocks (the key and events straddle block ends) changes nothing."""
    from servescope.trace import _split

    bare = write(tmp_path / "bare.json", raw_doc(NEWEST)["traceEvents"])
    expected = {NEWEST: load_trace(NEWEST).events, bare: load_trace(bare).events}
    if block >= 4096:  # the 14 MB B200 trace in 7-byte blocks would be slow
        expected[B200] = b200.events
    monkeypatch.setattr(_split, "BLOCK_BYTES", block)
    monkeypatch.setattr(_split, "CHUNK_BYTES", chunk)
    for path, frame in expected.items():
        assert load_trace(path).events.equals(frame), path


def test_separator_inside_strings_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from servescope.trace import _split

    monkeypatch.setattr(_split, "BLOCK_BYTES", 64)
    monkeypatch.setattr(_split, "CHUNK_BYTES", 10)  # cut after every event, often inside a name
    events = [kernel(float(i)) | {"name": 'k}, {"ph": "X"}, {' * (i % 3)} for i in range(50)]
    tr = load_trace(write(tmp_path / "t.json", {"traceEvents": events}))
    assert tr.events["name"].to_list() == [e["name"] for e in events]


def test_events_not_last_and_nested_key(tmp_path: Path) -> None:
    doc = {
        "INFO": {"traceEvents": [{"x": [1, 2]}]},  # same key, nested: the first regex match
        "traceEvents": [kernel(1.0), kernel(2.0)],
        "distributedInfo": {"rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1]}, {"a": 2}]},
        "deviceProperties": [{"id": 0, "name": "G", "numSms": 4}],
    }
    tr = load_trace(write(tmp_path / "t.json", doc))
    assert (tr.rank, tr.world_size, tr.devices[0].num_sms) == (5, 8, 4)
    assert tr.events["ts_us"].to_list() == [1.0, 2.0]
    assert tr.events["blocks_per_sm"].to_list() == [2.0, 2.0]  # 8 blocks / 4 SMs


# ---------------------------------------------------------------- property


CATS = ["kernel", "Kernel", "cpu_op", "python_function", "cuda_runtime", "ac2g", "gpu_memcpy", None]
_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i", "s", "f", "M"]),
        "cat": st.sampled_from(CATS),
        "name": st.text(max_size=12),
        "pid": st.one_of(st.integers(-1, 10**6), st.sampled_from(["Spans", "", "[TP00-DP01] 3"])),
        "tid": st.one_of(st.integers(0, 10**6), st.just("stream 7")),
        "ts": st.floats(0, 1e15, allow_nan=False),
        "dur": st.floats(-5, 1e6, allow_nan=False),
        "args": st.fixed_dictionaries({}, optional={"correlation": st.integers(0, 2**70)}),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(_event, min_size=1, max_size=30), gz=st.booleans())
def test_property_rows_sorted_nonnegative(
    tmp_path: Path, events: list[dict[str, Any]], gz: bool
) -> None:
    path = write(tmp_path / ("p.json.gz" if gz else "p.json"), {"traceEvents": events}, gz=gz)
    expected = kept_raw(events)
    if not expected:
        with pytest.raises(EmptyTrace):
            load_trace(path)
        return
    ev = load_trace(path).events
    assert ev.height == len(expected)
    assert dict(ev.schema) == CONTRACT
    assert ev["ts_us"].is_sorted() and ev["dur_us"].min() >= 0
    assert sorted(ev["ts_us"].to_list()) == sorted(e["ts"] for e in expected)
    big = sum(1 for e in expected if e["args"].get("correlation", 0) >= 2**63)
    assert (
        ev["correlation"].null_count()
        == sum(1 for e in expected if "correlation" not in e["args"]) + big
    )


def test_odd_top_level_values_are_ignored_with_warning(tmp_path: Path) -> None:
    doc = {
        "deviceProperties": "not a list",
        "distributedInfo": {"rank": "3", "world_size": 4},
        "traceEvents": [kernel(1.0)],
    }
    tr = load_trace(write(tmp_path / "t.json", doc))
    assert tr.devices == {}
    assert (tr.rank, tr.world_size) == (3, 4)  # a numeric string rank is read
    assert any("deviceProperties" in w for w in tr.warnings)


def test_float_and_odd_pids(tmp_path: Path) -> None:
    k1 = kernel(1.0) | {"pid": 1.0, "tid": "7"}
    k2 = kernel(2.0) | {"pid": "Spans", "tid": 7}
    for k in (k1, k2):
        del k["args"]["device"], k["args"]["stream"]
    tr = load_trace(write(tmp_path / "t.json", {"traceEvents": [k1, k2]}))
    assert tr.events["device"].to_list() == [1, None]
    assert tr.events["stream"].to_list() == [7, 7]


def test_bom_whitespace_and_nul_padding(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf  \n" + json.dumps({"traceEvents": [kernel(1.0)]}).encode() + b"\n\x00\x00"
    assert load_trace(_write_bytes(tmp_path / "t.json", data)).events.height == 1


def test_multi_member_gzip(tmp_path: Path) -> None:
    data = json.dumps({"traceEvents": [kernel(1.0), kernel(2.0)]}).encode()
    half = len(data) // 2
    path = _write_bytes(
        tmp_path / "t.json.gz", gzip.compress(data[:half]) + gzip.compress(data[half:])
    )
    assert load_trace(path).events.height == 2


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps({"traceEvents": [kernel(1.0)]}).encode())
    assert load_trace(_write_bytes(tmp_path / "t.json", data)).events.height == 1


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_folder_skips_non_traces_but_not_when_alone(tmp_path: Path) -> None:
    write(tmp_path / "rank0.json", {"traceEvents": [kernel(1.0)]})
    write(tmp_path / "config.json", {"model": "x"})
    write(tmp_path / "empty.json", {"traceEvents": []})
    [tr] = load_traces(tmp_path)
    assert tr.rank == 0
    assert any("skipped config.json" in w for w in tr.warnings)
    assert any("skipped empty.json" in w for w in tr.warnings)
    (tmp_path / "rank0.json").unlink()
    with pytest.raises((NotATrace, EmptyTrace)):
        load_traces(tmp_path)


def test_cut_before_any_event_says_so(tmp_path: Path) -> None:
    data, _ = _serialize([kernel(1.0), kernel(2.0)])
    path = _write_bytes(tmp_path / "cut.json", data[: data.index(b'"dur"')])
    with pytest.raises(EmptyTrace, match="after repair: truncated tail: kept 0 events"):
        load_trace(path)


def test_one_unreadable_event_in_the_middle_is_dropped(
    tmp_path: Path, small_events: list[dict[str, Any]]
) -> None:
    data, ends = _serialize(small_events)
    i = len(small_events) // 2  # break event i: an unescaped quote inside its name
    start = ends[i - 1] + 2
    name_at = data.index(b'"name": "', start) + len(b'"name": "')
    data = data[:name_at] + b'x"y' + data[name_at:]
    tr = _load_bytes(tmp_path, data)
    expected = kept_raw(small_events[:i] + small_events[i + 1 :])
    assert tr.events.height == len(expected)
    assert any("dropped the event there" in w for w in tr.warnings)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.sampled_from(
                [b"", b"N/A", b"\x01", b"\xff", b",", b"}", b'"', b"[", b"\\udc80", b"1e999"]
            ),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=4,
    ),
    gz=st.booleans(),
)
def test_property_damage_loads_or_fails_clearly(
    tmp_path: Path, edits: list[tuple[float, bytes, int]], gz: bool
) -> None:
    """Any damage to a real trace either loads (with warnings) or raises a ServescopeError."""
    data = NEWEST.read_bytes()
    for where, insert, n_deleted in edits:
        pos = int(where * len(data))
        data = data[:pos] + insert + data[pos + n_deleted :]
    path = _write_bytes(tmp_path / "fuzz.json", gzip.compress(data) if gz else data)
    try:
        tr = load_trace(path)
    except ServescopeError as exc:
        assert "fuzz.json" in str(exc) and "\n" not in str(exc)
        return
    assert dict(tr.events.schema) == CONTRACT


@pytest.mark.parametrize(
    "path", sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz"))), ids=str
)
def test_real_layouts_take_the_streaming_path(path: Path) -> None:
    """Every real file layout we have (Kineto native with INFO lines after the events, TraceLens
    re-dumps, compact SGLang JSON, 2021 files) streams without reading the file whole."""
    from servescope.trace._read import fast_decode

    assert fast_decode(path, []) is not None


@pytest.mark.parametrize(
    "path",
    [
        NEWEST,
        OLD_FLOW,
        ROCM,
        SAMPLED / "sampled_rank-0.json.gz",
        TRACES / "hta/triton_example/triton_example.json.gz",
    ],
    ids=str,
)
def test_streaming_and_exact_paths_agree(path: Path) -> None:
    from servescope.trace import _frame, _read

    w_fast: list[str] = []
    w_exact: list[str] = []
    fast = _read.fast_decode(path, w_fast)
    exact = _read.decode(path, _read.read_bytes(path, w_exact), w_exact, try_fast=False)
    assert fast is not None
    assert (fast.top, fast.n_events, w_fast) == (exact.top, exact.n_events, w_exact)
    a = _frame.finish_events(fast.parts, {}, fast.lost, [])[0]
    assert a.equals(_frame.finish_events(exact.parts, {}, exact.lost, [])[0])
