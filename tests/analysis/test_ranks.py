"""Rank folders: parallel workers (processes, Ray) give exactly the in-process answer; the cross-rank view;
one warning per cause.

Real traces: HTA's two sampled ranks (tests/data/traces/hta/trace_filter, MIT). Expected numbers are computed
here from the raw JSON with the stdlib (tests/independent.py) or from the per-rank breakdowns, never copied.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from independent import gpu_events, raw_events, union_us
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.ranks import analyze_rank_files, cross_rank_view, group_warnings
from servescope.cli import main
from servescope.errors import TraceNotFound

SAMPLED = Path(__file__).parents[1] / "data" / "traces" / "hta" / "trace_filter"
RANK0, RANK1 = SAMPLED / "sampled_rank-0.json.gz", SAMPLED / "sampled_rank-1.json.gz"


def _folder(tmp_path: Path, copies: dict[str, Path]) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for name, src in copies.items():
        shutil.copyfile(src, folder / name)
    return folder


def _truncated(src: Path, out: Path, keep: float) -> Path:
    data = gzip.decompress(src.read_bytes())
    out.write_bytes(data[: int(len(data) * keep)])
    return out


def test_processes_equal_in_process(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0, "rank1.json.gz": RANK1,
                                "rank2.json.gz": RANK0, "rank3.json.gz": RANK1})
    local = analyze_trace(folder, workers=1)
    parallel = analyze_trace(folder, workers=2)
    assert parallel == local
    assert [b.rank for b in local.ranks] == [0, 1, 2, 3]


def test_cross_rank_view_numbers() -> None:
    a = analyze_trace(SAMPLED, workers=1)
    v = a.cross_rank
    assert v is not None and [r.rank for r in v.ranks] == [0, 1]
    for row, src, b in zip(v.ranks, (RANK0, RANK1), a.ranks, strict=True):
        assert row.gpu_busy_us == pytest.approx(sum(s.gpu_busy_us for s in b.steps))
        # busy inside steps can never exceed the union of every GPU event of the file (independent, stdlib)
        gpu = gpu_events(raw_events(src))
        devices = {e.get("args", {}).get("device", e.get("pid")) for e in gpu}
        total = sum(union_us([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu
                              if e.get("args", {}).get("device", e.get("pid")) == d]) for d in devices)
        assert 0 < row.gpu_busy_us <= total + 1e-6
    assert v.steps_compared == min(len(b.steps) for b in a.ranks)
    for s in v.steps:
        spans = {b.rank: b.steps[s.index].gpu_span_us for b in a.ranks}
        assert s.max_us == max(spans.values()) and s.min_us == min(spans.values())
        assert spans[s.slowest_rank] == s.max_us and spans[s.fastest_rank] == s.min_us
    assert sum(v.slowest_rank_counts.values()) == v.steps_compared
    for c in v.collectives:
        per_rank = [sum(st.collectives[c.collective].total_us for st in b.steps[: v.steps_compared]
                        if c.collective in st.collectives) for b in a.ranks]
        assert list(c.per_rank_us) == pytest.approx(per_rank)
        assert c.skew_us == pytest.approx(max(per_rank) - min(per_rank))


def test_single_rank_has_no_cross_rank_view() -> None:
    a = analyze_trace(RANK0)
    assert a.cross_rank is None
    assert cross_rank_view(a.ranks) is None


def test_one_warning_per_cause(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0})
    for r in (1, 4, 6):
        _truncated(RANK1, folder / f"rank{r}.json", 0.7)
    a = analyze_trace(folder, workers=1)
    truncated = [w for w in a.warnings if "truncated tail" in w]
    assert len(truncated) == 1, a.warnings
    assert truncated[0].startswith("3 files: truncated tail: kept ")
    assert truncated[0].endswith("(rank1.json, rank4.json, rank6.json)")
    assert [b.rank for b in a.ranks] == [0, 1, 4, 6]  # every file says rank 0 or 1: the names win


def test_group_warnings_details_differ() -> None:
    lines = group_warnings([("a", ["truncated tail: kept 5 events", "x"]), ("b", ["truncated tail: kept 7 events"]),
                            ("c", [])])
    assert lines == ["2 files: truncated tail (details differ per file) (a, b)", "a: x"]
    assert group_warnings([("only", ["w", "w"])]) == ["w"]


def test_broken_file_does_not_sink_the_folder(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0, "rank1.json.gz": RANK1})
    (folder / "rank2.json").write_text("[" * 5000 + "]" * 5000)  # RecursionError in the loader sank the folder
    (folder / "config.json").write_text('{"model": "x"}')
    a = analyze_trace(folder, workers=1)
    assert [b.rank for b in a.ranks] == [0, 1]
    assert any(w.startswith("rank2.json: skipped (JSON nested too deeply") for w in a.warnings), a.warnings
    assert any(w.startswith("config.json: skipped (") for w in a.warnings), a.warnings


def test_cli_compact_view_and_per_rank() -> None:
    runner = CliRunner()
    compact = runner.invoke(main, ["trace", str(SAMPLED)])
    full = runner.invoke(main, ["trace", str(SAMPLED), "--per-rank"])
    assert compact.exit_code == 0 and full.exit_code == 0
    assert "2 ranks: GPU busy per rank" in compact.output and "collective wait skew" in compact.output
    assert "sampled_rank-0" not in compact.output  # no per-rank report by default
    assert "sampled_rank-0" in full.output and "sampled_rank-1" in full.output


def test_ray_equals_local(tmp_path: Path) -> None:
    """servescope starts the local Ray itself (analysis/ranks.py `_ray_init`): local-only, so its node address is
    loopback, usage reporting is off in its processes and their cloud probe goes to a refusing proxy on loopback;
    this process's environment is as it was."""
    ray = pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0, "rank1.json.gz": RANK1, "rank2.json.gz": RANK0})
    local = analyze_trace(folder, workers=1)
    environ = {k: v for k, v in os.environ.items() if k not in ("RAY_USAGE_STATS_ENABLED",
                                                               "RAY_USAGE_STATS_PROMPT_ENABLED")}
    assert not ray.is_initialized()
    try:
        on_ray = analyze_trace(folder, ray_address="local")
        node = ray._private.worker._global_node
        assert node.node_ip_address == "127.0.0.1"
        children = [p.process.pid for infos in node.all_processes.values() for p in infos]
        with pytest.raises(TraceNotFound) as missing:  # a task's own error comes back bare, not in Ray's traceback
            analyze_rank_files([folder / "gone.json", folder / "rank0.json.gz"], ray_address="local")
        for pid in children if Path("/proc/self/environ").exists() else ():
            env = dict(e.split("=", 1) for e in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in e)
            assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env["http_proxy"] == "http://127.0.0.1:1"
            assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and "127.0.0.1" in env["no_proxy"]
    finally:
        ray.shutdown()
    assert on_ray == local
    assert str(missing.value) == f"{folder / 'gone.json'}: no such file or folder"
    assert {k: v for k, v in os.environ.items() if k in environ or k.lower().endswith("proxy")} == environ
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "0"
    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER is True


def test_ray_that_cannot_answer_is_one_line_at_once() -> None:
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    from servescope.analysis.ranks import analyze_rank_file
    from servescope.analysis.ray_tasks import _address_problem, _loopback_problem, run_on_ray
    from servescope.errors import ServescopeError

    assert _loopback_problem() is None
    assert _address_problem("auto", 1.0) is None  # not host:port: Ray finds the cluster itself
    with pytest.raises(ServescopeError) as refused:  # its own 10 s connect timeout bounds the wait
        run_on_ray(analyze_rank_file, [str(RANK0)], 10, "127.0.0.1:1")  # nothing listens on port 1
    message = str(refused.value)
    assert message.startswith("cannot start or join Ray at '127.0.0.1:1': 127.0.0.1:1: ") and "\n" not in message
    assert message.endswith("run without --ray (worker processes on this machine)")


@pytest.mark.skipif(shutil.which("unshare") is None or not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs unshare and root (a network namespace whose loopback is down)")
def test_local_ray_without_loopback_is_one_line_not_a_hang(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0, "rank1.json.gz": RANK1})
    out = subprocess.run(["unshare", "-n", sys.executable, "-m", "servescope", "trace", str(folder), "--ray"],
                         capture_output=True, text=True, timeout=120)  # a liveness guard: a hang fails the test
    if out.returncode != 0 and "unshare" in out.stderr:
        pytest.skip(f"no network namespace here: {out.stderr.strip()}")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == ("servescope: cannot start or join a local Ray: loopback (127.0.0.1) does not work here "
                          "(Network is unreachable); run without --ray (worker processes on this machine)\n")


def test_skipped_files_fold_into_one_line(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"rank0.json.gz": RANK0})
    for r in (1, 4, 6):
        (folder / f"rank{r}.json").write_text("[" * 5000)
    a = analyze_trace(folder, workers=1)
    deep = [w for w in a.warnings if "nested too deeply" in w]
    assert deep == ["3 files: skipped (JSON nested too deeply to read (over ~1,000 levels); not a Kineto trace) "
                    "(rank1.json, rank4.json, rank6.json)"]


def test_compact_view_prints_markup_device_names_verbatim(tmp_path: Path) -> None:
    src = Path(__file__).parents[1] / "data/traces/tracelens/inference/vllm_decode_full/graph_execution.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for props in doc["deviceProperties"]:
        props["name"] = "[/]GPU[bold]"
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in (0, 1):
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["trace", str(folder)])
    assert result.exit_code == 0, result.stderr
    assert "[/]GPU[bold]" in result.stdout
