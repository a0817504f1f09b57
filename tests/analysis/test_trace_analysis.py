"""End-to-end analysis of the real serving traces, checked against independent stdlib computations."""

from __future__ import annotations

import statistics

import pytest

from independent import DATA, gpu_events, raw_events, union_us
from servescope.analysis.analyze import analyze_trace

TRACES = DATA / "traces"
B200 = TRACES / "tracelens" / "b200" / "eager_trace.json.gz"
VLLM_FULL = TRACES / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
VLLM_PIECEWISE = TRACES / "tracelens" / "inference" / "vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
SGLANG = TRACES / "tracelens" / "inference" / "sglang_prefilldecode" / "sglang_Qwen3-8B_prefilldecode.json.gz"


def test_b200_prefill_all_reduce_share() -> None:
    events = gpu_events(raw_events(B200))
    ar = [e for e in events if "all_reduce" in e["name"]]
    busy = union_us([(e["ts"], e["ts"] + e["dur"]) for e in events])
    ar_union = union_us([(e["ts"], e["ts"] + e["dur"]) for e in ar])

    a = analyze_trace(B200)
    (rank,) = a.ranks
    (step,) = rank.steps
    assert (step.kind, step.tokens, step.batch_size) == ("prefill", 888, 1)
    assert step.kernels == len(events)  # every GPU event lands in the one step
    assert step.gpu_busy_us == pytest.approx(busy, rel=1e-6)
    stats = step.collectives["all_reduce"]
    assert stats.calls == len(ar) == 73
    assert stats.median_us == pytest.approx(statistics.median(e["dur"] for e in ar))
    share = step.classes_us["communication"] / step.gpu_busy_us
    assert share == pytest.approx(
        union_us([(e["ts"], e["ts"] + e["dur"]) for e in events if "all_reduce" in e["name"] or "nccl" in e["name"]])
        / busy, rel=1e-6)
    assert 0.15 < ar_union / busy < 0.25  # "about 20% of GPU busy time"
    assert 25 < stats.median_us < 35  # "about 29 µs"
    (comm,) = [f for f in a.findings if f.code == "communication_bound"]
    assert comm.severity == ("low" if share < 0.25 else "medium")
    assert comm.evidence["calls_per_step"] == 73


@pytest.mark.parametrize(
    ("path", "kind", "batch"),
    [(VLLM_FULL, "decode", 32), (VLLM_PIECEWISE, "mixed", 46), (SGLANG, "prefill", 15)],
)
def test_graph_and_sglang_traces_attribute_every_kernel(path, kind: str, batch: int) -> None:
    n_gpu = len(gpu_events(raw_events(path)))
    (rank,) = analyze_trace(path).ranks
    assert [s.kind for s in rank.steps] == [kind]
    assert rank.steps[0].batch_size == batch
    assert sum(s.kernels for s in rank.steps) == n_gpu


def test_full_graph_decode_fans_out_one_launch() -> None:
    (rank,) = analyze_trace(VLLM_FULL).ranks
    (step,) = rank.steps
    assert step.graph_launches == 1
    assert step.kernels > 400  # 421 kernels replayed under one hipGraphLaunch (reference §1.2)
