"""NCCL traces from HTA (A100 DDP, two ranks of one job): collective counts, means and skew between ranks."""

from __future__ import annotations

import statistics

import pytest

from independent import DATA, gpu_events, raw_events
from servescope.analysis.analyze import analyze_trace

HTA = DATA / "traces" / "hta"
NCCL = HTA / "nccl_parser_config" / "nccl_data.json.gz"
TWO_RANKS = HTA / "trace_filter"


def test_nccl_all_reduce_counts_and_mean() -> None:
    ar = [e["dur"] for e in gpu_events(raw_events(NCCL)) if "AllReduce" in e["name"]]
    bc = [e["dur"] for e in gpu_events(raw_events(NCCL)) if "Broadcast" in e["name"]]
    (rank,) = analyze_trace(NCCL).ranks
    assert rank.outside_steps_events == 0 or rank.outside_steps_us >= 0
    calls = sum(s.collectives["all_reduce"].calls for s in rank.steps)
    total = sum(s.collectives["all_reduce"].total_us for s in rank.steps)
    # Every AllReduce of the trace falls inside ProfilerStep#4..#6.
    assert calls == len(ar) == 15
    assert total / calls == pytest.approx(statistics.mean(ar), rel=1e-9)
    assert sum(s.collectives["broadcast"].calls for s in rank.steps) == len(bc)
    for s in rank.steps:
        stats = s.collectives["all_reduce"]
        assert stats.mean_us == pytest.approx(stats.total_us / stats.calls)


def test_two_rank_folder_reports_skew() -> None:
    a = analyze_trace(TWO_RANKS)
    assert [r.rank for r in a.ranks] == [0, 1]
    (skew,) = [f for f in a.findings if f.code == "rank_skew"]
    busy = []
    for name in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        (r,) = [r for r in a.ranks if r.file.endswith(name)]
        busy.append(sum(s.gpu_busy_us for s in r.steps))
    assert skew.evidence["busy_max_us"] == pytest.approx(max(busy))
    assert skew.evidence["busy_spread_share"] == pytest.approx((max(busy) - min(busy)) / max(busy))
    # Every kernel is ncclKernel_SendRecv_*, but the launching ops say all-reduce, all-gather and
    # all-to-all (checked call by call in test_collectives_launch_op.py): no send/recv is left.
    for r in a.ranks:
        assert {c for s in r.steps for c in s.collectives} == {"all_reduce", "all_gather", "all_to_all"}
