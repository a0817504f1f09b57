"""Big JSON documents are written in pieces (issue 21 part 2: `validate --json` of 1 M rows held ~0.5 GB of text
twice): the pieces join to exactly the text `to_json` makes (msgspec's own indented encoding, compared here), on
stdout and through -o alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from servescope.cli._app import Output
from servescope.report import render
from servescope.report.render import json_pieces, streams, to_json

NESTED: dict[str, Any] = {
    "schema": "x/1", "empty_list": [], "empty_dict": {}, "none": None, "text": "line\nbreak \"quoted\" ü",
    "rows": [{"id": i, "v": i / 7, "tags": ["a", {"b": [i, None]}], "e": {}} for i in range(11)],
    "nested": {"deep": [[1, 2], [], [{"k": "v"}]], "n": 1.5e-300},
}


def _expected(document: dict[str, Any]) -> str:
    return msgspec.json.format(msgspec.json.encode(document), indent=2).decode()


@pytest.mark.parametrize("batch", [1, 3, 11, 1000])
def test_pieces_join_to_the_whole_text(batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "_BATCH", batch)
    for document in (NESTED, {}, {"only": [1]}, {"a": {"b": {}}}):
        assert "".join(json_pieces(document)) == _expected(document) == to_json(document)
    if batch == 1:  # no piece holds more than one row's text
        assert max(len(p) for p in json_pieces(NESTED)) < len(_expected(NESTED)) / 5


def test_a_big_document_streams_to_stdout_and_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = {"schema": "x/1", "rows": [{"id": i, "x": i * 0.1} for i in range(render.STREAM_ITEMS + 1)]}
    assert streams(document) and not streams({"rows": document["rows"][:10]})
    Output("json").emit(document)
    assert capsys.readouterr().out == _expected(document) + "\n"
    path = tmp_path / "out.json"
    Output("json", path).emit(document)
    assert path.read_text() == _expected(document) + "\n"
    assert json.loads(path.read_text()) == document
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left
