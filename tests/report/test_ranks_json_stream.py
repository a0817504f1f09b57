"""A rank folder's `trace --json` written one rank at a time (report.trace_json_pieces.trace_document_pieces): the same
bytes as the document rendered at once, one rank's part held at a time, and nothing half-written on failure.

Real traces: HTA's two sampled ranks (tests/data/traces/hta/trace_filter, MIT) and an Nsight Systems export of two
GPU processes (tests/data/traces/nsys-ai, one file → two ranks).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from independent import DATA
from servescope.advise import analyze
from servescope.analysis.analyze import TraceAnalysis, analyze_trace
from servescope.cli import main
from servescope.report import trace_json, trace_json_pieces
from servescope.report.render import to_json

SAMPLED = DATA / "traces" / "hta" / "trace_filter"
NSYS = DATA / "traces" / "nsys-ai" / "h100_2gpu_1s.sqlite"


def _folder(tmp_path: Path, n: int = 3, damaged: bool = False) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(n):
        shutil.copyfile(SAMPLED / f"sampled_rank-{r % 2}.json.gz", folder / f"rank{r}.json.gz")
    if damaged:
        (folder / f"rank{n}.json").write_text('{"traceEvents": [')  # one bad rank: a warning line, not the run
    return folder


def _streamed(a: TraceAnalysis) -> str:
    return "".join(trace_json_pieces.trace_document_pieces(a))


@pytest.mark.parametrize("case", ["folder", "damaged", "kind", "no peaks", "nsys", "one rank"])
def test_pieces_are_the_document_byte_for_byte(tmp_path: Path, case: str) -> None:
    """Every key, every rank, in order: the streamed text is `to_json(trace_document(a))` exactly."""
    if case == "nsys":
        a = analyze(NSYS)
    elif case == "one rank":
        a = analyze(SAMPLED / "sampled_rank-0.json.gz")
    elif case == "no peaks":  # ranks resolve their peaks in the report (TraceAnalysis.peaks empty)
        a = analyze_trace(_folder(tmp_path), workers=1)
    else:
        a = analyze(_folder(tmp_path, damaged=case == "damaged"), workers=1,
                    kind="decode" if case == "kind" else None)
    assert len(a.ranks) == (1 if case == "one rank" else 2 if case == "nsys" else 3)
    if case == "damaged":
        assert any(w.startswith("rank3.json: skipped (") for w in a.warnings), a.warnings
    assert _streamed(a) == to_json(trace_json.trace_document(a))


def test_one_rank_part_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rank's part is built when it is written, not before: when rank k's text comes out, the document
    builder has run for the other keys and ranks 0..k only."""
    a = analyze(_folder(tmp_path, 3), workers=1)
    built: list[int] = []
    real = trace_json_pieces.trace_document

    def counting(x: TraceAnalysis) -> dict[str, object]:
        built.append(len(x.ranks))
        return real(x)

    monkeypatch.setattr(trace_json_pieces, "trace_document", counting)
    seen = []
    for piece in trace_json_pieces.trace_document_pieces(a):
        if piece.lstrip().startswith('{\n      "rank": '):  # a rank's part begins
            seen.append(len(built))
    assert built == [0, 1, 1, 1]  # the rest (no ranks), then one rank at a time
    assert seen == [2, 3, 4]


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["trace", *args])
    return result.exit_code, result.stdout, result.stderr


def test_cli_stdout_and_file_are_the_document(tmp_path: Path) -> None:
    """`trace DIR --json` and `-o out.json`: the whole document, as rendering it at once gives (with its final
    newline), warnings on stderr as before."""
    folder = _folder(tmp_path, 3, damaged=True)
    expected = to_json(trace_json.trace_document(analyze(folder, workers=1))) + "\n"
    code, out, err = _cli(str(folder), "--json", "--workers", "1")
    assert code == 0, err
    assert out == expected
    assert "servescope: warning: rank3.json: skipped (" in err
    target = tmp_path / "out.json"
    code, _, err = _cli(str(folder), "--workers", "1", "-o", str(target))
    assert code == 0, err
    assert target.read_text() == expected
    assert [r["rank"] for r in json.loads(expected)["ranks"]] == [0, 1, 2]


def test_cli_failure_mid_document_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure after some ranks were written leaves the previous file whole and no temporary file behind
    (report.atomic): a reader never sees half a document."""
    folder = _folder(tmp_path, 3)
    target = tmp_path / "out.json"
    target.write_text("previous\n")
    real = trace_json_pieces.trace_document_pieces

    def breaking(a: TraceAnalysis) -> Iterator[str]:
        for n, piece in enumerate(real(a)):
            if n == 10:  # inside "ranks", after the first rank's part
                raise RuntimeError("the disk went away")
            yield piece

    monkeypatch.setattr(trace_json_pieces, "trace_document_pieces", breaking)
    result = CliRunner().invoke(main, ["trace", str(folder), "--workers", "1", "-o", str(target)])
    assert result.exit_code != 0
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "ranks"]
