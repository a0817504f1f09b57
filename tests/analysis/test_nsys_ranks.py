"""An Nsight Systems export of several processes is analysed as one rank per (process, GPU) (issue 9, part 3 + 4).

Real inputs: the nsys-ai exports (GindaChen/nsys-ai fixtures, MIT; 2 processes on 2 H100s, one GPU each):
tests/data/traces/nsys-ai/mfu_2gpu_{before,after}.sqlite and h100_2gpu_1s.sqlite
(copies of ../shared/traces/nsys-ai). Every expected value is computed here from the SQLite tables with the stdlib (sqlite3 + plain Python), sharing
no code with servescope: per (pid, device), the union of kernel, memcpy and memset intervals and the row counts.
Before the split, one Trace held both GPUs, so a "rank" had 2 GPUs' busy time over one span (> 100%).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from independent import DATA
from servescope.analysis.analyze import analyze_trace
from servescope.report.trace_json import trace_document
from servescope.trace.nsys import load_nsys_ranks

PAIR = [DATA / "traces" / "nsys-ai" / "mfu_2gpu_before.sqlite", DATA / "traces" / "nsys-ai" / "mfu_2gpu_after.sqlite"]
EXPORTS = [*PAIR, DATA / "traces" / "nsys-ai" / "h100_2gpu_1s.sqlite"]
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
PID = "/ 16777216 % 16777216"  # serialized globalPid/globalTid → pid (NVIDIA, "Serialized process and thread ids")


def _gpu_rows(path: Path) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(pid, deviceId) → [(start ns, end ns)] over the three GPU tables (tables nsys did not write are skipped)."""
    rows: dict[tuple[int, int], list[tuple[int, int]]] = {}
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as con:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in (t for t in GPU_TABLES if t in tables):
            for pid, device, start, end in con.execute(f'SELECT globalPid {PID}, deviceId, start, "end" FROM {table}'):
                rows.setdefault((pid, device), []).append((start, end))
    return rows


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, (cur_start, cur_end) = 0, sorted(intervals)[0]
    for start, end in sorted(intervals):
        if start > cur_end:
            total, cur_start, cur_end = total + cur_end - cur_start, start, end
        else:
            cur_end = max(cur_end, end)
    return total + cur_end - cur_start


def _runtime_calls_per_pid(path: Path) -> dict[int, int]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as con:
        sql = f"SELECT globalTid {PID}, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1"
        return dict(con.execute(sql).fetchall())


@pytest.mark.parametrize("path", EXPORTS)
def test_one_rank_per_process_and_gpu_with_its_own_busy_time(path: Path) -> None:
    rows = _gpu_rows(path)
    assert len(rows) == 2  # two processes, one GPU each
    analysis = analyze_trace(path)
    # one GPU per process and distinct ordinals: the rank is the CUDA ordinal
    expected = {device: _union_ns(iv) / 1000.0 for (_, device), iv in rows.items()}
    busy = {r.rank: sum(s.gpu_busy_us for s in r.steps) for r in analysis.ranks}
    assert busy == pytest.approx(expected, rel=1e-9)
    events = {r.rank: sum(s.kernels for s in r.steps) for r in analysis.ranks}
    assert events == {device: len(iv) for (_, device), iv in rows.items()}
    assert all(r.outside_steps_events == 0 for r in analysis.ranks)


@pytest.mark.parametrize("path", EXPORTS)
def test_no_share_exceeds_the_span(path: Path) -> None:
    """Busy is a union on one GPU now: never longer than the step's span, so no '% of span' exceeds 100%."""
    analysis = analyze_trace(path)
    for rank in analysis.ranks:
        assert {s.devices for s in rank.steps} == {1}
        for s in rank.steps:
            assert s.gpu_busy_us <= s.gpu_span_us * (1 + 1e-12) and s.idle_us >= -1e-6
    view = analysis.cross_rank
    assert view is not None and [r.rank for r in view.ranks] == [0, 1]
    assert all(0 < r.gpu_busy_us <= r.gpu_span_us for r in view.ranks)
    assert view.steps_compared == min(len(r.steps) for r in analysis.ranks) > 0
    # before the split the one "rank" summed both GPUs over one span: more than 100% of it
    rows = _gpu_rows(path)
    union_both_ns = sum(_union_ns(iv) for iv in rows.values())
    every = [iv for ivs in rows.values() for iv in ivs]
    assert union_both_ns > max(e for _, e in every) - min(s for s, _ in every)


@pytest.mark.parametrize("path", PAIR)
def test_parts_hold_their_gpu_rows_and_their_process_cpu_rows(path: Path) -> None:
    rows, calls = _gpu_rows(path), _runtime_calls_per_pid(path)
    parts = load_nsys_ranks(path)
    assert [(p.rank, p.world_size) for p in parts] == [(0, 2), (1, 2)]
    for part in parts:
        (pid, device), = [key for key in rows if key[1] == part.rank]
        kinds = part.events["kind"]
        assert part.events.filter(kinds.is_in(["kernel", "memcpy", "memset"])).height == len(rows[(pid, device)])
        assert part.events.filter(kinds.is_in(["runtime", "driver", "other"])).height == calls[pid]
        assert set(part.events["pid"].drop_nulls()) == {str(pid)}
        assert part.metadata["process"].endswith(f"(pid {pid})") and part.metadata["device"] == str(device)


def test_folder_of_exports_in_parallel_equals_in_process(tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    for path in PAIR:
        shutil.copyfile(path, folder / path.name)
    local = analyze_trace(folder, workers=1)
    assert len(local.ranks) == 4  # two exports × two GPUs
    # The documents, not the dataclasses: breakdown() sums floats in Polars group-bys whose order follows its
    # threads, so on ~30k rows two in-process runs already differ in the last bit (1e-16 relative); the
    # document rounds µs to 3 decimals.
    assert trace_document(analyze_trace(folder, workers=2)) == trace_document(local)
