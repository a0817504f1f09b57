"""Rank-folder worker processes (servescope.analysis.rank_workers): forked when started before Polars is imported (the CLI),
spawned otherwise, and either way exactly the in-process answer.

The fork path cannot run inside pytest's own process (Polars is imported there, so `fork_is_safe()` is False and
the pool spawns), so it runs in a fresh interpreter that imports the CLI the way `servescope trace` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from servescope.analysis.rank_workers import RankPool, folder_files, fork_is_safe, parallel_workers
from servescope.trace.folder import list_trace_files

SAMPLED = Path(__file__).parents[1] / "data" / "traces" / "hta" / "trace_filter"
RANK0, RANK1 = SAMPLED / "sampled_rank-0.json.gz", SAMPLED / "sampled_rank-1.json.gz"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r, src in enumerate((RANK0, RANK1, RANK0)):
        shutil.copyfile(src, folder / f"rank{r}.json.gz")
    return folder


def test_early_start_lists_the_loaders_files(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "x.async_llm.1.pt.trace.json.gz").write_bytes(RANK0.read_bytes())
    (folder / "notes.txt").write_text("not a trace")
    assert sorted(folder_files(folder)) == list_trace_files(folder)[0]


def test_the_rank_rule_imports_no_polars() -> None:
    code = "import sys, servescope.analysis.rank_workers, servescope.trace.folder, servescope.trace.types; " \
           "print('polars' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_spawns_once_polars_is_imported() -> None:
    assert not fork_is_safe()  # this process imported Polars (and runs its threads)
    with RankPool(2) as pool:
        assert pool.start_method == "spawn"
        assert pool.submit(sum, [1, 2]).result() == 3


def test_parallel_workers() -> None:
    assert parallel_workers([RANK0, RANK1]) == 1  # under PARALLEL_MIN_BYTES: in-process
    assert parallel_workers([RANK0, RANK1], workers=8) == 2  # never more than files
    assert parallel_workers([RANK0], workers=4) == 1
    with pytest.raises(ValueError):
        RankPool(1)


FORKED = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import servescope.cli  # what `servescope trace` has imported when it starts the workers
    from servescope.analysis.rank_workers import start_for_folder
    folder = Path(sys.argv[1])
    pool = start_for_folder(folder, 2, None)
    from servescope.analysis.analyze import analyze_trace
    with pool:
        forked = analyze_trace(folder, workers=pool)
    print(json.dumps({"start_method": pool.start_method, "equal": forked == analyze_trace(folder, workers=1),
                      "ranks": [b.rank for b in forked.ranks]}))
""")


def test_forked_workers_equal_in_process(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    done = subprocess.run([sys.executable, "-c", FORKED, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"start_method": "fork", "equal": True, "ranks": [0, 1, 2]}


def test_cli_forked_workers_same_document(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    docs = []
    for workers in ("2", "1"):
        done = subprocess.run([sys.executable, "-m", "servescope", "trace", "--json", str(folder), "--workers", workers],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        docs.append(json.loads(done.stdout))
    assert docs[0] == docs[1]
    assert len(docs[0]["ranks"]) == 3
