"""`ProfilerStep#N` on any CPU-side kind: the 2021 (PyTorch 1.9) ResNet-50 trace writes them as `cat: Operator`.

Expected values come from stdlib gzip+json: the six ProfilerStep events and, per step, the GPU events whose
`Runtime` launch (same correlation) starts inside that step's interval.
"""

from __future__ import annotations

import bisect

import polars as pl

from independent import DATA, gpu_events, raw_events
from servescope.analysis.classify import classify
from servescope.analysis.steps import find_steps
from servescope.trace import load_trace

OLD_2021 = DATA / "traces" / "kineto" / "tb_plugin_samples" / "worker0.1623143089861.pt.trace.json.gz"


def test_profiler_steps_on_operator_events_are_six_steps() -> None:
    events = raw_events(OLD_2021)
    marks = sorted((e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    assert {e["cat"] for e in marks} == {"Operator"}
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "Runtime"
                 and "correlation" in (e.get("args") or {})}
    starts = [e["ts"] for e in marks]
    expected_counts = [0] * len(marks)
    for g in gpu_events(events):
        ts = launch_ts.get(g["args"].get("correlation"))
        i = bisect.bisect_right(starts, ts) - 1 if ts is not None else -1
        if i >= 0 and ts <= marks[i]["ts"] + marks[i]["dur"]:
            expected_counts[i] += 1

    table = find_steps(classify(load_trace(OLD_2021).events))
    steps = table.steps
    assert steps.height == len(marks) == 6
    assert set(steps["source"]) == {"profiler_step"}
    assert steps["label"].to_list() == [e["name"] for e in marks]
    assert steps["cpu_start_us"].to_list() == [float(e["ts"]) for e in marks]
    assert steps["cpu_end_us"].to_list() == [float(e["ts"] + e["dur"]) for e in marks]
    counts = table.gpu_events.group_by("step").len().sort("step")
    assert counts["len"].to_list() == expected_counts
    assert sum(expected_counts) == len(gpu_events(events))  # every kernel, memcpy and memset in a step


def _frame(rows: list[tuple[str, str, float, float, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        [{"kind": k, "name": n, "ts_us": ts, "dur_us": d, "correlation": c} for k, n, ts, d, c in rows],
        schema={"kind": pl.Utf8, "name": pl.Utf8, "ts_us": pl.Float64, "dur_us": pl.Float64, "correlation": pl.Int64},
    ).with_columns(pl.lit(0, pl.Int64).alias("device"), pl.lit(None, pl.Int64).alias("external_id"))


def test_same_step_on_two_kinds_counts_once_and_nulls_are_ignored() -> None:
    """Edge: one ProfilerStep written both as user_annotation and cpu_op; a null-named CPU row."""
    frame = _frame([
        ("user_annotation", "ProfilerStep#3", 0.0, 100.0, None),
        ("cpu_op", "ProfilerStep#3", 0.0, 100.0, None),
        ("cpu_op", None, 10.0, 1.0, None),  # type: ignore[list-item]
        ("cpu_op", "ProfilerStep#4", 200.0, 100.0, None),
        ("runtime", "cudaLaunchKernel", 20.0, 1.0, 1),
        ("runtime", "cudaLaunchKernel", 220.0, 1.0, 2),
        ("kernel", "k", 30.0, 5.0, 1),
        ("kernel", "k", 230.0, 5.0, 2),
    ])
    table = find_steps(classify(frame))
    assert table.steps["label"].to_list() == ["ProfilerStep#3", "ProfilerStep#4"]
    assert table.gpu_events.sort("ts_us")["step"].to_list() == [0, 1]


def test_engine_labels_on_cpu_op_rows_are_read_too() -> None:
    frame = _frame([
        ("cpu_op", "step[DECODE bs=4]", 0.0, 100.0, None),
        ("runtime", "cudaLaunchKernel", 20.0, 1.0, 1),
        ("kernel", "k", 30.0, 5.0, 1),
    ])
    steps = find_steps(classify(frame)).steps
    assert steps.select("kind", "batch_size", "source").row(0) == ("decode", 4, "sglang")
