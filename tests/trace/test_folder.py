"""The one rank-folder rule (trace/folder.py): a folder of trace subfolders is separate runs, named, not ranks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servescope.errors import TraceNotFound
from servescope.trace import load_traces
from servescope.trace.folder import rank_files

HTA_DIFF = Path(__file__).parents[1] / "data" / "traces" / "hta" / "trace_diff"  # HTA's control/ + test/ pair


def test_the_hta_control_test_folder_says_what_it_holds_and_the_diff_to_run() -> None:
    with pytest.raises(TraceNotFound) as e:
        rank_files(HTA_DIFF)
    msg = str(e.value)
    assert "2 trace folders" in msg and "control/, test/" in msg
    assert f"servescope diff {HTA_DIFF / 'control'} {HTA_DIFF / 'test'}" in msg
    assert "empty" not in msg  # it was "(folder is empty)" before


def test_subfolders_are_runs_never_ranks(tmp_path: Path) -> None:
    # One rank file beside the subfolders: the folder's own files are its ranks, the subfolders are ignored.
    for side in ("control", "test"):
        (tmp_path / side).mkdir()
        shutil.copy(HTA_DIFF / side / f"{side}.json.gz", tmp_path / side / "rank0.json.gz")
    with pytest.raises(TraceNotFound, match="2 trace folders"):
        load_traces(tmp_path)
    shutil.copy(HTA_DIFF / "control" / "control.json.gz", tmp_path / "rank1.json.gz")
    files, _ = rank_files(tmp_path)
    assert [f.name for f in files] == ["rank1.json.gz"]


def test_one_subfolder_or_many(tmp_path: Path) -> None:
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "x.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a trace")
    with pytest.raises(TraceNotFound, match=r"a trace folder: only/: use `servescope trace .*only`"):
        rank_files(tmp_path)
    for i in range(8):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / "t.json").write_text("{}")
    with pytest.raises(TraceNotFound, match=r"9 trace folders .*, …: give one of them"):
        rank_files(tmp_path)


def test_a_folder_of_non_trace_subfolders_is_still_empty(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("x")
    with pytest.raises(TraceNotFound, match="folder is empty"):
        rank_files(tmp_path)
