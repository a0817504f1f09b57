"""Every bundled real trace either analyses or fails with a clear ServescopeError — never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from independent import DATA
from servescope.analysis.analyze import analyze_trace
from servescope.errors import ServescopeError

FILES = sorted(
    p for p in (DATA / "traces").rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz", ".sqlite"))
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_analyses_or_fails_cleanly(path: Path) -> None:
    try:
        a = analyze_trace(path)
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
