"""servescope export: every original event survives (count and a hash of each), the new tracks exist, the output
is valid gzip JSON, it is written atomically and the input is never modified.

Expected values are computed here with stdlib gzip+json: the multiset of sha256 hashes of each original event
(canonical JSON: sorted keys) must equal that of the output's events minus servescope's two synthetic pids; step
slices are counted against the trace's ProfilerStep#N annotations; the memory-class slices must cover the union
of the trace's memcpy/memset intervals (independent.union_us)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from independent import DATA, raw_events, union_us
from servescope.cli import main
from servescope.errors import NotATrace, OutputError
from servescope.report.perfetto import CLASSES_PID, STEPS_PID, export_perfetto

HTA = DATA / "traces" / "hta" / "trace_diff" / "control" / "control.json.gz"  # 6 ProfilerSteps, A100
B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"  # vLLM, one prefill step
PLAIN = DATA / "traces" / "kineto" / "docs_traces" / "before_fix_trace.json"  # plain JSON, no step labels
NS = DATA / "traces" / "hta" / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
OURS = {STEPS_PID, CLASSES_PID}


def _doc(path: Path) -> dict[str, Any]:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:  # raises if not valid gzip
            parsed: dict[str, Any] = json.load(fh)
            return parsed
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def _hashes(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(hashlib.sha256(json.dumps(e, sort_keys=True).encode()).hexdigest() for e in events)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hta_events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("hta") / "a.json.gz"
    export_perfetto(HTA, out)
    events: list[dict[str, Any]] = _doc(out)["traceEvents"]
    return events


@pytest.mark.parametrize("trace", [B200, PLAIN], ids=["b200", "plain"])
def test_every_original_event_survives(trace: Path, tmp_path: Path) -> None:
    before = _sha(trace)
    out = tmp_path / "annotated.json.gz"
    result = export_perfetto(trace, out)
    assert _sha(trace) == before  # the input is untouched
    original = raw_events(trace)
    doc = _doc(out)
    kept = [e for e in doc["traceEvents"] if e.get("pid") not in OURS]
    added = [e for e in doc["traceEvents"] if e.get("pid") in OURS]
    assert len(kept) == len(original) == result.original_events
    assert _hashes(kept) == _hashes(original)
    assert len(added) == result.added_events > 0
    source = json.loads(gzip.decompress(trace.read_bytes())) if trace.suffix == ".gz" else json.loads(
        trace.read_text())
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in source.items()
                                                                   if k != "traceEvents"}
    assert [p.name for p in tmp_path.iterdir()] == ["annotated.json.gz"]  # no temporary file left


def test_step_and_class_tracks(hta_events: list[dict[str, Any]]) -> None:
    events = hta_events
    original = raw_events(HTA)
    assert len([e for e in events if e.get("pid") not in OURS]) == len(original)
    meta = {(e["pid"], e.get("tid"), e["name"]): e["args"]["name"] for e in events if e.get("ph") == "M"
            and e.get("pid") in OURS}
    assert meta[(STEPS_PID, None, "process_name")] == "servescope steps"
    assert meta[(CLASSES_PID, None, "process_name")] == "servescope kernel classes"
    assert "unknown steps" in {v for (pid, _, what), v in meta.items() if pid == STEPS_PID and what == "thread_name"}
    steps = [e for e in events if e.get("pid") == STEPS_PID and e["ph"] == "X"]
    labels = sorted(e["name"] for e in original if e.get("name", "").startswith("ProfilerStep#"))
    assert sorted(e["args"]["label"] for e in steps) == labels
    assert all(e["name"] == f"unknown {e['args']['label']}" and e["dur"] > 0 for e in steps)
    # Kernel-class tracks: one per (GPU, class); the memory slices cover exactly the memcpy/memset union.
    class_threads = {v for (pid, _, what), v in meta.items() if pid == CLASSES_PID and what == "thread_name"}
    assert {"GPU 3 gemm", "GPU 3 memory", "GPU 3 communication"} <= class_threads
    memory = [e for e in events if e.get("pid") == CLASSES_PID and e["ph"] == "X" and e["name"] == "memory"]
    raw_mem = [(e["ts"], e["ts"] + e["dur"]) for e in original if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    assert sum(e["dur"] for e in memory) == pytest.approx(union_us(raw_mem), abs=0.01 * len(memory))
    by_track: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e.get("pid") == CLASSES_PID and e["ph"] == "X":
            by_track.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():  # X slices on one thread must not overlap
        spans.sort()
        assert all(a_end < b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))


def test_ns_trace_annotations_stay_in_the_file_unit(tmp_path: Path) -> None:
    out = tmp_path / "ns.json"
    export_perfetto(NS, out)
    events = _doc(out)["traceEvents"]
    kernels = [e["ts"] for e in events if e.get("cat") == "kernel"]
    ours = [e["ts"] for e in events if e.get("pid") == CLASSES_PID and e["ph"] == "X"]
    assert ours and min(kernels) == pytest.approx(min(ours), rel=1e-12)


def test_a_trace_written_in_ns_gets_annotations_in_ns(tmp_path: Path) -> None:
    """Synthetic edge case: the plain trace moved to epoch µs (2023) then written in ns (ts, dur ×1000), which
    the loader recognises (values beyond epoch µs) and converts."""
    doc = json.loads(PLAIN.read_text())
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), int | float):
            e["ts"] = (e["ts"] + 1_700_000_000_000_000) * 1000
        if isinstance(e.get("dur"), int | float):
            e["dur"] = e["dur"] * 1000
    ns_trace = tmp_path / "ns.json"
    ns_trace.write_text(json.dumps(doc))
    out = tmp_path / "out.json"
    result = export_perfetto(ns_trace, out)
    assert any("ns" in w for w in result.warnings)
    events = _doc(out)["traceEvents"]
    kernels = [(e["ts"], e["dur"]) for e in events if e.get("cat") == "kernel"]
    ours = [(e["ts"], e["dur"]) for e in events if e.get("pid") == CLASSES_PID and e["ph"] == "X"]
    assert ours and min(ours)[0] == pytest.approx(min(kernels)[0], rel=1e-12)
    assert sum(d for _, d in ours) == pytest.approx(union_us([(t, t + d) for t, d in kernels]), rel=1e-6)


def test_cli_overwrites_atomically_and_refuses_bad_targets(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "b200.json.gz"
    out.write_text("old")
    result = runner.invoke(main, ["export", str(B200), "-o", str(out)])
    assert result.exit_code == 0 and "original events" in result.stdout
    assert len(_doc(out)["traceEvents"]) > 24_000
    copy = tmp_path / "in.json.gz"
    copy.write_bytes(B200.read_bytes())
    same = runner.invoke(main, ["export", str(copy), "-o", str(copy)])
    assert same.exit_code == 1 and "never modifies its input" in same.output and _sha(copy) == _sha(B200)
    folder = runner.invoke(main, ["export", str(DATA / "traces" / "hta" / "trace_filter"), "-o", str(out)])
    assert folder.exit_code == 1 and len(folder.output.strip().splitlines()) == 1
    nsys = runner.invoke(main, ["export", str(DATA / "traces" / "nsys-ai" / "mfu_2gpu_before.sqlite"), "-o", str(out)])
    assert nsys.exit_code == 1 and "Nsight Systems" in nsys.output and len(nsys.output.strip().splitlines()) == 1


def test_damaged_trace_is_refused_without_output(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    text = json.dumps(raw_events(PLAIN))
    cut.write_text('{"traceEvents": ' + text[: len(text) // 2])
    out = tmp_path / "out.json.gz"
    with pytest.raises(NotATrace, match="intact"):
        export_perfetto(cut, out)
    assert not out.exists()
    with pytest.raises(OutputError):
        export_perfetto(PLAIN, tmp_path / "no" / "such" / "folder" / "out.json")
