"""Rank folders analysed inside `ranks.without_timelines()` (what `servescope trace` runs): no rank keeps its
timelines, every other field equals the full analysis, and such a run's cache is its own (a cached outcome equals a
fresh one of the same run: a later run that wants timelines does not get a cache entry without them).

Real traces: HTA's two sampled ranks (tests/data/traces/hta/trace_filter, MIT).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from independent import DATA
from servescope.analysis.rank_cache import caching
from servescope.analysis.ranks import RankOutcome, analyze_rank_files, without_timelines

SAMPLED = DATA / "traces" / "hta" / "trace_filter"


def _files(tmp_path: Path, n: int = 3) -> list[Path]:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(n):
        shutil.copyfile(SAMPLED / f"sampled_rank-{r % 2}.json.gz", folder / f"rank{r}.json.gz")
    (folder / f"rank{n}.json").write_text("[1, 2")  # a bad rank stays a line
    return sorted(folder.iterdir())


def _without(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    return [o if o.breakdown is None else replace(o, breakdown=replace(o.breakdown, timelines=()))
            for o in outcomes]


@pytest.mark.parametrize("workers", [1, 2])
def test_no_timelines_and_nothing_else_lost(tmp_path: Path, workers: int) -> None:
    files = _files(tmp_path)
    full = analyze_rank_files(files, workers=1)
    assert all(o.breakdown.timelines for o in full if o.breakdown is not None)  # the full run keeps them
    with without_timelines():
        lean = analyze_rank_files(files, workers=workers)
    assert [o.error is not None for o in lean] == [False, False, False, True]
    assert all(o.breakdown is None or o.breakdown.timelines == () for o in lean)
    assert [str(o.error) for o in lean] == [str(o.error) for o in full]
    assert [replace(o, error=None) for o in lean] == [replace(o, error=None) for o in _without(full)]
    tops = [[k.name for k in o.breakdown.kinds[0].top_kernels] for o in lean if o.breakdown is not None]
    assert tops[0] == tops[2] and all(a is b for a, b in zip(tops[0], tops[2], strict=True))  # one copy each


def test_a_lean_run_caches_apart(tmp_path: Path) -> None:
    """Lean, lean again (all from the cache), then full: the full run analyses every file again and keeps its
    timelines; the cache folder holds one file per kind of run."""
    files, cache = _files(tmp_path), tmp_path / "cache"
    with caching(cache) as use, without_timelines():
        first = analyze_rank_files(files, workers=1)
    assert use is not None and (use.hits, use.misses) == (0, 4)
    with caching(cache) as use, without_timelines():
        again = analyze_rank_files(files, workers=1)
    assert use is not None and (use.hits, use.misses) == (4, 0)
    assert [str(o.error) for o in again] == [str(o.error) for o in first]
    assert [replace(o, error=None) for o in again] == [replace(o, error=None) for o in first]
    with caching(cache) as use:
        full = analyze_rank_files(files, workers=1)
    assert use is not None and (use.hits, use.misses) == (0, 4)
    assert all(o.breakdown.timelines for o in full if o.breakdown is not None)
    assert len(list(cache.iterdir())) == 2
