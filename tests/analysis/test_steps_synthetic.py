"""Edge cases of step finding on small synthetic event tables (the contract of docs/architecture.md §1)."""

from __future__ import annotations

import polars as pl

from servescope.analysis.steps import find_steps

SCHEMA = {
    "kind": pl.Utf8, "name": pl.Utf8, "ts_us": pl.Float64, "dur_us": pl.Float64, "pid": pl.Utf8, "tid": pl.Utf8,
    "device": pl.Int64, "stream": pl.Int64, "correlation": pl.Int64, "external_id": pl.Int64,
    "grid_blocks": pl.Int64, "block_threads": pl.Int64, "blocks_per_sm": pl.Float64,
}


def frame(rows: list[tuple]) -> pl.DataFrame:
    """rows: (kind, name, ts_us, dur_us, correlation)."""
    data = [
        {"kind": k, "name": n, "ts_us": ts, "dur_us": d, "pid": "1", "tid": "1",
         "device": 0 if k == "kernel" else None, "stream": 7 if k == "kernel" else None, "correlation": c,
         "external_id": None, "grid_blocks": None, "block_threads": None, "blocks_per_sm": None}
        for k, n, ts, d, c in rows
    ]
    return pl.DataFrame(data, schema=SCHEMA).sort("ts_us")


def test_graph_replay_fans_out_to_its_step_even_when_gpu_lags() -> None:
    rows = [
        ("user_annotation", "execute_context_0(0)_generation_8(8)", 0.0, 100.0, None),
        ("runtime", "cudaGraphLaunch", 50.0, 5.0, 1),
        ("user_annotation", "execute_context_0(0)_generation_8(8)", 200.0, 100.0, None),
        ("runtime", "cudaGraphLaunch", 250.0, 5.0, 2),
    ]
    # The first replay's kernels run long after the first label closed (GPU lag): still step 0.
    rows += [("kernel", f"k{i}", 150.0 + i, 1.0, 1) for i in range(30)]
    rows += [("kernel", f"k{i}", 400.0 + i, 1.0, 2) for i in range(30)]
    table = find_steps(frame(rows))
    assert table.steps["kind"].to_list() == ["decode", "decode"]
    counts = table.gpu_events.group_by("step").len().sort("step")["len"].to_list()
    assert counts == [30, 30]


def test_outer_label_around_one_inner_label_is_one_step() -> None:
    rows = [
        ("user_annotation", "execute_100_context_1(sq100sk100sqsq10000sqsk10000)_generation_0(sq0sk0sqsq0sqsk0)",
         0.0, 1000.0, None),
        ("user_annotation", "step[EXTEND bs=1 toks=100]", 100.0, 500.0, None),
        ("runtime", "cudaLaunchKernel", 50.0, 1.0, 1),   # input preparation before step[…]
        ("runtime", "cudaLaunchKernel", 300.0, 1.0, 2),
        ("runtime", "cudaLaunchKernel", 900.0, 1.0, 3),  # sampling after step[…]
        ("kernel", "prep", 60.0, 1.0, 1), ("kernel", "gemm", 310.0, 1.0, 2), ("kernel", "argmax", 910.0, 1.0, 3),
    ]
    table = find_steps(frame(rows))
    assert table.steps["label"].to_list() == ["step[EXTEND bs=1 toks=100]"]
    assert table.gpu_events["step"].to_list() == [0, 0, 0]


def test_wrapper_around_two_steps_is_dropped() -> None:
    rows = [
        ("user_annotation", "ProfilerStep#1", 0.0, 1000.0, None),  # engine labels win over ProfilerStep
        ("user_annotation", "step[DECODE bs=4]", 100.0, 100.0, None),
        ("user_annotation", "step[DECODE bs=4]", 300.0, 100.0, None),
        ("runtime", "cudaLaunchKernel", 150.0, 1.0, 1), ("runtime", "cudaLaunchKernel", 350.0, 1.0, 2),
        ("kernel", "a", 160.0, 1.0, 1), ("kernel", "b", 360.0, 1.0, 2),
    ]
    table = find_steps(frame(rows))
    assert table.steps.height == 2
    assert table.gpu_events.sort("ts_us")["step"].to_list() == [0, 1]


def test_no_labels_segments_at_idle_gaps() -> None:
    rows = []
    for seg, base in enumerate((0.0, 10_000.0, 25_000.0)):
        for i in range(20):
            rows.append(("runtime", "cudaLaunchKernel", base + 10 * i - 5, 2.0, seg * 100 + i))
            rows.append(("kernel", "k", base + 10 * i, 8.0, seg * 100 + i))
    table = find_steps(frame(rows))
    assert table.steps.height == 3
    assert set(table.steps["source"].to_list()) == {"idle_gap"}
    assert "idle gaps" in table.method
    assert table.gpu_events.group_by("step").len()["len"].to_list() == [20, 20, 20]
