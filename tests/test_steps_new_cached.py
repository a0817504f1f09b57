"""vLLM's Aug 2025 step label `execute_new_N_cached_M` (PR #22496: N scheduled new requests, M cached ones).
No trace in /work/shared/traces carries this form, so the tests are synthetic: the parser, and a small event
table where those labels must make the steps (not the idle-gap fallback)."""

from __future__ import annotations

import pytest

from servescope.steps import find_steps, parse_step_label
from test_steps_synthetic import frame


@pytest.mark.parametrize(
    ("label", "kind", "batch"),
    [("execute_new_4_cached_0", "prefill", 4), ("execute_new_0_cached_32", "decode", 32),
     ("execute_new_2_cached_30", "mixed", 32), ("execute_new_0_cached_0", "unknown", None),
     ("execute_new_1_cached_255", "mixed", 256)],
)
def test_kind_and_batch_from_request_counts(label: str, kind: str, batch: int | None) -> None:
    parsed = parse_step_label(label)
    assert parsed is not None
    assert (parsed.kind, parsed.batch_size, parsed.tokens, parsed.source) == (kind, batch, None, "vllm")


@pytest.mark.parametrize("label", ["execute_new_2_cached_", "execute_new_x_cached_3", "execute_new_2_cached_3_x",
                                   "execute_new_2", "xexecute_new_2_cached_3"])
def test_near_misses_are_not_labels(label: str) -> None:
    assert parse_step_label(label) is None


def test_labels_make_the_steps_instead_of_idle_gaps() -> None:
    """Three labelled steps whose kernels run back to back (no idle gap to cut at): the labels give three steps
    with their kinds and batches, and each step owns the kernels its launches made."""
    labels = [("execute_new_3_cached_0", 0.0), ("execute_new_1_cached_3", 300.0), ("execute_new_0_cached_4", 600.0)]
    rows: list[tuple] = []
    for n, (label, start) in enumerate(labels):
        rows.append(("user_annotation", label, start, 250.0, None))
        for i in range(10):
            corr = n * 100 + i
            rows.append(("runtime", "cudaLaunchKernel", start + 10 + 20 * i, 2.0, corr))
            rows.append(("kernel", f"k{i}", 1000.0 + n * 300 + 30 * i, 30.0, corr))
    table = find_steps(frame(rows))
    steps = table.steps.sort("cpu_start_us")
    assert steps["source"].to_list() == ["vllm"] * 3
    assert steps["kind"].to_list() == ["prefill", "mixed", "decode"]
    assert steps["batch_size"].to_list() == [3, 4, 4]
    assert steps["tokens"].to_list() == [None, None, None]
    per_step = table.gpu_events.group_by("step").len().sort("step")["len"].to_list()
    assert per_step == [10, 10, 10]
