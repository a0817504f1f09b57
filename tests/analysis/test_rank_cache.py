"""The per-rank summary cache (analysis/rank_cache.py, `trace --cache DIR`): a second run analyses only the files
whose size or mtime changed; a damaged cache, or one of another servescope version, is ignored and rebuilt with a
warning; a cached answer equals a fresh analysis (computed here without any cache, in the same process).

Real traces: HTA's two sampled ranks (tests/data/traces/hta/trace_filter, MIT).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import servescope
from independent import gpu_events, raw_events, union_us
from servescope.analysis import rank_cache, ranks
from servescope.analysis.rank_cache import cache_file, caching
from servescope.analysis.ranks import RankOutcome, analyze_rank_files
from servescope.cli import main

SAMPLED = Path(__file__).parents[1] / "data" / "traces" / "hta" / "trace_filter"
RANK0, RANK1 = SAMPLED / "sampled_rank-0.json.gz", SAMPLED / "sampled_rank-1.json.gz"


def _folder(tmp_path: Path, n: int = 3) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir(parents=True)
    for r in range(n):
        shutil.copyfile((RANK0, RANK1)[r % 2], folder / f"rank{r}.json.gz")
    return folder


def _files(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the analysis itself ran on (not taken from the cache), in-process."""
    seen: list[str] = []
    real = ranks.analyze_rank_file

    def spy(path: str, top_n: int = 10) -> list[RankOutcome]:
        seen.append(Path(path).name)
        return real(path, top_n)

    monkeypatch.setattr(ranks, "analyze_rank_file", spy)
    return seen


def _cached_run(folder: Path, cache: Path, top_n: int = 10) -> tuple[list[RankOutcome], rank_cache.CacheUse]:
    with caching(cache) as use:
        out = analyze_rank_files(_files(folder), top_n, workers=1)
    assert use is not None
    return out, use


def _fresh(folder: Path, top_n: int = 10) -> list[RankOutcome]:
    return analyze_rank_files(_files(folder), top_n, workers=1)


def test_second_run_reads_only_what_changed(tmp_path: Path, analysed: list[str]) -> None:
    folder, cache = _folder(tmp_path), tmp_path / "cache"
    before = sorted(p.name for p in folder.iterdir())
    first, use = _cached_run(folder, cache)
    assert (analysed, use.hits, use.misses, use.warnings) == (["rank0.json.gz", "rank1.json.gz", "rank2.json.gz"],
                                                              0, 3, [])
    assert sorted(p.name for p in folder.iterdir()) == before  # never writes beside its inputs
    assert [p.name for p in cache.iterdir()] == [cache_file(cache, [str(f) for f in _files(folder)], "top_n=10").name]

    analysed.clear()
    second, use = _cached_run(folder, cache)
    assert (analysed, use.hits, use.misses) == ([], 3, 0)
    analysed.clear()
    assert second == first == _fresh(folder)

    analysed.clear()  # a newer mtime, same size and bytes: analysed again
    st = (folder / "rank1.json.gz").stat()
    os.utime(folder / "rank1.json.gz", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    _, use = _cached_run(folder, cache)
    assert (analysed, use.hits, use.misses) == (["rank1.json.gz"], 2, 1)

    analysed.clear()  # other bytes of another size under the same mtime: analysed again, the new answer
    st = (folder / "rank2.json.gz").stat()
    shutil.copyfile(RANK1, folder / "rank2.json.gz")
    os.utime(folder / "rank2.json.gz", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (folder / "rank2.json.gz").stat().st_size != st.st_size
    changed, use = _cached_run(folder, cache)
    assert (analysed, use.hits, use.misses) == (["rank2.json.gz"], 2, 1)
    analysed.clear()
    assert changed == _fresh(folder)
    assert changed[2].breakdown is not None and first[2].breakdown is not None
    assert changed[2].breakdown.steps != first[2].breakdown.steps  # rank 1's events now, not rank 0's


def test_options_that_change_the_answer_miss(tmp_path: Path, analysed: list[str]) -> None:
    folder, cache = _folder(tmp_path, 2), tmp_path / "cache"
    _cached_run(folder, cache, top_n=10)
    analysed.clear()
    top3, use = _cached_run(folder, cache, top_n=3)
    assert (use.hits, use.misses) == (0, 2)
    analysed.clear()
    assert top3 == _fresh(folder, top_n=3)
    assert all(len(s.top_kernels) <= 3 for o in top3 if o.breakdown for s in o.breakdown.steps)
    analysed.clear()  # each option keeps its own cache file: neither evicts the other
    _, use = _cached_run(folder, cache, top_n=10)
    assert (analysed, use.hits, len(list(cache.iterdir()))) == ([], 2, 2)


def test_diff_of_two_captures_uses_the_cache(tmp_path: Path, analysed: list[str]) -> None:
    from servescope.analysis.diff import diff_traces

    before, after = _folder(tmp_path / "before", 2), _folder(tmp_path / "after", 2)
    shutil.copyfile(RANK0, after / "rank1.json.gz")  # the second capture differs in one rank
    cache = tmp_path / "cache"
    with caching(cache) as first:
        d1 = diff_traces(before, after)
    assert first is not None and (first.hits, first.misses) == (0, 4)
    analysed.clear()
    with caching(cache) as second:
        d2 = diff_traces(before, after)
    assert second is not None and (analysed, second.hits, second.misses) == ([], 4, 0)
    analysed.clear()
    assert d2 == d1 == diff_traces(before, after)


def _damaged_warning(use: rank_cache.CacheUse, why: str) -> None:
    assert len(use.warnings) == 1, use.warnings
    assert use.warnings[0].startswith(f"rank cache {use.folder}/ranks-") and why in use.warnings[0]
    assert use.warnings[0].endswith("; ignored and rebuilt") and "\n" not in use.warnings[0]


@pytest.mark.parametrize("damage", ["garbage", "cut", "columns", "payload"])
def test_damaged_cache_is_rebuilt_with_a_warning(tmp_path: Path, analysed: list[str], damage: str) -> None:
    folder, cache = _folder(tmp_path, 2), tmp_path / "cache"
    _cached_run(folder, cache)
    path = next(cache.iterdir())
    if damage == "garbage":
        path.write_bytes(b"not parquet at all")
    elif damage == "cut":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "columns":
        pl.DataFrame({"path": ["x"], "rank": [1]}).write_parquet(path)
    else:  # the right columns, a breakdown that does not decode
        frame = pl.read_parquet(path)
        frame.with_columns(pl.lit(b"\x78\x9cnot deflate", dtype=pl.Binary).alias("breakdown")).write_parquet(path)
    analysed.clear()
    rebuilt, use = _cached_run(folder, cache)
    _damaged_warning(use, "not a servescope rank cache" if damage == "columns" else ": damaged (")
    assert (analysed, use.misses) == (["rank0.json.gz", "rank1.json.gz"], 2)
    analysed.clear()
    assert rebuilt == _fresh(folder)
    analysed.clear()
    again, use = _cached_run(folder, cache)  # the rebuilt cache is whole
    assert (analysed, use.hits, use.warnings) == ([], 2, [])
    assert again == rebuilt


def test_cache_of_another_version_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, cache = _folder(tmp_path, 2), tmp_path / "cache"
    with monkeypatch.context() as m:
        m.setattr(rank_cache, "VERSION", "0.0.0-older")
        _cached_run(folder, cache)
    this = rank_cache.VERSION
    assert this == servescope.__version__ != "0.0.0-older"
    out, use = _cached_run(folder, cache)
    _damaged_warning(use, f": written by servescope 0.0.0-older, this is {this}")
    assert (use.hits, use.misses) == (0, 2)
    assert out == _fresh(folder)
    assert set(pl.read_parquet(next(cache.iterdir()))["version"].to_list()) == {this}


def test_summary_columns_match_an_independent_count(tmp_path: Path) -> None:
    """The cache's summary columns: one row per rank; GPU busy inside steps never exceeds the union of every GPU
    event of the raw file (stdlib, tests/independent.py) and equals the fresh breakdown's."""
    folder, cache = _folder(tmp_path, 2), tmp_path / "cache"
    _cached_run(folder, cache)
    frame = pl.read_parquet(next(cache.iterdir())).sort("path")
    fresh = _fresh(folder)
    assert frame["path"].to_list() == [os.path.realpath(f) for f in _files(folder)]
    for row, src, o in zip(frame.iter_rows(named=True), (RANK0, RANK1), fresh, strict=True):
        assert o.breakdown is not None
        raw = gpu_events(raw_events(src))
        assert 0 < row["gpu_busy_us"] <= union_us([(e["ts"], e["ts"] + e["dur"]) for e in raw]) + 1e-6
        assert row["gpu_busy_us"] == pytest.approx(sum(s.gpu_busy_us for s in o.breakdown.steps))
        assert row["steps"] == len(o.breakdown.steps) and row["error"] is None


def test_unwritable_cache_warns_and_answers(tmp_path: Path) -> None:
    folder, blocker = _folder(tmp_path, 2), tmp_path / "a-file"
    blocker.write_text("not a folder")
    out, use = _cached_run(folder, blocker)
    assert out == _fresh(folder)
    assert any("cannot write it" in w and w.endswith("results not cached") for w in use.warnings), use.warnings


def test_cli_cache_same_document_and_bad_rank_kept(tmp_path: Path) -> None:
    """`trace --cache DIR` twice and without the cache: the same document, the damaged rank reported each time;
    a damaged cache is one warning line on stderr, the answer unchanged."""
    folder, cache = _folder(tmp_path, 3), tmp_path / "cache"
    (folder / "rank3.json").write_text('{"traceEvents": [')
    runner = CliRunner()
    docs = []
    for args in (["--cache", str(cache)], ["--cache", str(cache)], []):
        result = runner.invoke(main, ["trace", "--json", str(folder), "--workers", "1", *args])
        assert result.exit_code == 0, result.output
        docs.append(json.loads(result.stdout))
    assert docs[0] == docs[1] == docs[2]
    assert [r["rank"] for r in docs[0]["ranks"]] == [0, 1, 2]
    assert any(w.startswith("rank3.json: skipped (") for w in docs[0]["warnings"]), docs[0]["warnings"]
    next(cache.iterdir()).write_bytes(b"PAR1 damaged")
    result = runner.invoke(main, ["trace", "--json", str(folder), "--workers", "1", "--cache", str(cache)])
    assert result.exit_code == 0 and json.loads(result.stdout) == docs[2]
    damaged = [line for line in result.stderr.splitlines() if "rank cache" in line]
    assert len(damaged) == 1 and damaged[0].startswith("servescope: warning: rank cache ")
    assert damaged[0].endswith("; ignored and rebuilt")


def test_a_single_file_writes_no_cache(tmp_path: Path) -> None:
    """`trace FILE --cache DIR`: a rank folder's cache; one trace is read again and nothing is written."""
    cache = tmp_path / "cache"
    with caching(cache) as use:
        out = analyze_rank_files([RANK0], workers=1)
    assert use is not None and (use.hits, use.misses, use.warnings) == (0, 0, [])
    assert not cache.exists() and out == analyze_rank_files([RANK0], workers=1)
