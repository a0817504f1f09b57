"""Every bundled real trace either analyses or fails with a clear ServescopeError — never another exception; and on
every one the kernel-tuning saving never exceeds the time of the kernels it names (issue 19 target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from independent import DATA
from servescope.advise import analyze, kernel_evidence
from servescope.analysis.headroom import HEADROOM_MIN
from servescope.errors import ServescopeError
from servescope.perfmodel import Scenario
from servescope.planner.track import Context
from servescope.planner.tracks_kernels import kernel_tuning_track

FILES = sorted(
    p for p in (DATA / "traces").rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz", ".sqlite"))
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_analyses_or_fails_cleanly(path: Path) -> None:
    try:
        a = analyze(path)  # with the GPUs' peaks and measured references: the kernel findings too
    except ServescopeError as exc:
        message = str(exc)
        assert path.name in message and "\n" not in message
        return
    for rank in a.ranks:
        for step in rank.steps:
            assert 0 <= step.gpu_busy_us <= step.gpu_span_us * step.devices + 1e-6
            # Unions per class never exceed the busy union, and busy never exceeds the plain sum.
            assert all(v <= step.gpu_busy_us + 1e-6 for v in step.classes_us.values())
            assert step.gpu_busy_us <= step.kernel_sum_us + 1e-6
    _kernel_savings_are_bounded(a)


def _kernel_savings_are_bounded(a) -> None:  # type: ignore[no-untyped-def]
    for f in a.findings:
        if f.code == "kernel_headroom" and "saved_us" in f.evidence:
            assert 0 <= float(f.evidence["saved_us"]) <= float(f.evidence["measured_us"])
    ev = kernel_evidence(a)
    for r in ev.rows:
        assert 0 <= r.saved_us <= r.measured_us
        assert r.tunable == (r.achievable_us is not None and r.measured_us >= HEADROOM_MIN * r.achievable_us)
    # the track reads only the scenario's GPU and engine for its preconditions, and the evidence
    ctx = Context(Scenario.build("llama-3.1-8b", "h100"), None, None, "tpot", 1, kernels=ev)  # type: ignore[arg-type]
    p = kernel_tuning_track(ctx)
    for kind, k in (p.details.get("per_kind") or {}).items():
        assert 0 <= k["saved_us_per_step"] <= k["kernels_us_per_step"] <= k["step_us"] + 1e-6, kind
        assert k["gain_on_step"] <= k["step_us"] / (k["step_us"] - k["kernels_us_per_step"] + 1e-9)
    if not any(r.tunable for r in ev.rows):
        assert not p.applicable and p.whatif is None  # nothing to tune: no gain claimed
