"""Hypothesis properties of the breakdown on random synthetic steps: the parts add up to the step."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_steps_synthetic import frame

from servescope.analysis.breakdown import breakdown_steps
from servescope.analysis.classify import classify
from servescope.analysis.steps import find_steps

NAMES = ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nvjet_tst_64x64", "flash_fwd_kernel", "rms_norm_kernel",
         "silu_and_mul_kernel", "fused_moe_kernel", "at_elementwise"]

kernels = st.lists(
    st.tuples(st.sampled_from(NAMES), st.floats(0, 500), st.floats(0.1, 50), st.integers(0, 1)),
    min_size=1, max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(kernels)
def test_parts_add_up(rows: list[tuple[str, float, float, int]]) -> None:
    events = [("user_annotation", "step[DECODE bs=4]", 0.0, 1000.0, None),
              ("user_annotation", "step[DECODE bs=4]", 2000.0, 1000.0, None)]
    for i, (name, ts, dur, step) in enumerate(rows):
        events.append(("runtime", "cudaLaunchKernel", 10.0 + step * 2000.0 + i, 1.0, i))
        events.append(("kernel", name, 100.0 + step * 2000.0 + ts, dur, i))
    table = find_steps(classify(frame(events)))
    steps = breakdown_steps(table)
    assert sum(s.kernels for s in steps) == len(rows)
    for s in steps:
        assert sum(s.class_sum_us.values()) == pytest.approx(s.kernel_sum_us)
        assert sum(s.class_calls.values()) == s.kernels
        assert s.gpu_busy_us <= s.kernel_sum_us + 1e-6
        assert s.gpu_busy_us <= sum(s.classes_us.values()) + 1e-6  # union ≤ sum of class unions
        assert all(v <= s.gpu_busy_us + 1e-6 for v in s.classes_us.values())
        assert s.comm_exposed_us + s.comm_overlapped_us == pytest.approx(s.classes_us.get("communication", 0.0))
        assert s.idle_us == pytest.approx(max(0.0, s.gpu_span_us - s.gpu_busy_us))
        assert s.launches == s.kernels  # one launch per kernel in this synthetic trace


def test_exposed_communication_under_compute() -> None:
    # An all-reduce [0, 100) with a GEMM [40, 70) under it: 30 µs hidden, 70 µs exposed.
    events = [("user_annotation", "step[DECODE bs=1]", -50.0, 500.0, None),
              ("runtime", "cudaLaunchKernel", -40.0, 1.0, 1), ("runtime", "cudaLaunchKernel", -30.0, 1.0, 2),
              ("kernel", NAMES[0], 0.0, 100.0, 1), ("kernel", NAMES[1], 40.0, 30.0, 2)]
    (s,) = breakdown_steps(find_steps(classify(frame(events))))
    assert s.comm_exposed_us == pytest.approx(70.0)
    assert s.comm_overlapped_us == pytest.approx(30.0)
    assert s.gpu_busy_us == pytest.approx(100.0)
    assert pl.Series(list(s.collectives)).to_list() == ["all_reduce"]
