"""vLLM's Aug 2025 step label `execute_new_N_cached_M` (PR #22496: N scheduled new requests, M cached ones).
No trace in /work/shared/traces carries this form, so the tests are synthetic: the parser, a small event table
where those labels must make the steps (not the idle-gap fallback), and the real B200 vLLM trace with its step
label rewritten to this form."""

from __future__ import annotations

import gzip
import json

import pytest
from test_steps_synthetic import frame

from independent import DATA
from servescope.analysis.breakdown import breakdown
from servescope.analysis.steps import find_steps, parse_step_label
from servescope.trace import load_trace


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


def test_real_trace_relabelled_keeps_its_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The real B200 vLLM trace with its step label rewritten to the Aug 2025 form (a copy in tmp_path): still one
    labelled step, now decode with batch 1 and no tokens, holding the same GPU time as under the original label."""
    src = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
    with gzip.open(src, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    renamed = 0
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("execute_context_1(888"):
            e["name"] = "execute_new_0_cached_1"
            renamed += 1
    assert renamed == 2  # the CPU user_annotation and its gpu_user_annotation
    relabelled = tmp_path / "relabelled.json.gz"
    with gzip.open(relabelled, "wt", encoding="utf-8") as fh:
        json.dump(doc, fh)
    before, after = breakdown(load_trace(src)).steps, breakdown(load_trace(relabelled)).steps
    assert len(after) == 1 and after[0].source == "vllm"
    assert (after[0].kind, after[0].batch_size, after[0].tokens) == ("decode", 1, None)
    assert after[0].gpu_busy_us == before[0].gpu_busy_us and after[0].gpu_span_us == before[0].gpu_span_us
