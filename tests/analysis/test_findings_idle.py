"""Idle inside a step, split by its cause (issue 20): launch-bound only when the CPU's launch calls explain at least
half the idle, host-bound otherwise and between graph replays. On the bundled real B200 eager prefill (TraceLens, MIT)
768 launches cost 5.8 ms of the 72.9 ms idle: host work, not launches."""

from __future__ import annotations

from dataclasses import replace

from servescope.analysis.analyze import analyze_trace, example_trace
from servescope.analysis.findings import LAUNCH_EXPLAINS_IDLE, launch_bound


def _prefill():  # type: ignore[no-untyped-def]
    b = analyze_trace(example_trace()).ranks[0]
    return next(k for k in b.kinds if k.kind == "prefill")


def test_eager_idle_that_launches_do_not_explain_is_host_bound() -> None:
    s = _prefill()
    f = launch_bound(s, 0)
    assert f is not None and f.code == "host_bound"
    share = f.evidence["launch_share_of_idle"]
    assert share == s.launch_cpu_us / s.idle_us and share < LAUNCH_EXPLAINS_IDLE
    assert "cuda_graphs" in f.mitigations


def test_eager_idle_mostly_in_launch_calls_is_launch_bound() -> None:
    s = _prefill()
    f = launch_bound(replace(s, launch_cpu_us=0.8 * s.idle_us, graph_launches=0), 0)
    assert f is not None and f.code == "launch_bound" and f.mitigations == ("cuda_graphs",)


def test_idle_between_graph_replays_is_never_launch_bound() -> None:
    s = _prefill()
    f = launch_bound(replace(s, launch_cpu_us=0.9 * s.idle_us, graph_launches=3), 0)
    assert f is not None and f.code == "host_bound" and "graph replays" in f.message
