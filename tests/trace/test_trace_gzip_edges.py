"""gzip files as they come off disks and copies: zero padding, trailing junk, several members (a regression:
a padded file once made the inflater loop forever)."""

from __future__ import annotations

import gzip
from pathlib import Path

from independent import DATA
from servescope.trace import load_trace

SMALL = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"


def _kernels(path: Path) -> int:
    return int((load_trace(path).events["kind"] == "kernel").sum())


def test_zero_padding_after_the_member(tmp_path: Path) -> None:
    padded = tmp_path / "padded.json.gz"
    padded.write_bytes(SMALL.read_bytes() + b"\x00" * 512)
    assert _kernels(padded) == _kernels(SMALL) > 0
    assert load_trace(padded).warnings == ()


def test_trailing_junk_is_ignored_with_a_warning(tmp_path: Path) -> None:
    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(SMALL.read_bytes() + b"not gzip at all")
    t = load_trace(junk)
    assert int((t.events["kind"] == "kernel").sum()) == _kernels(SMALL)
    assert any("non-gzip" in w for w in t.warnings)


def test_json_split_over_two_members(tmp_path: Path) -> None:
    text = gzip.decompress(SMALL.read_bytes())
    half = len(text) // 2
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    assert _kernels(two) == _kernels(SMALL)


def test_unknown_schema_version_warns(tmp_path: Path) -> None:
    import json

    doc = json.loads(gzip.decompress(SMALL.read_bytes()))
    doc["schemaVersion"] = 99
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(doc))
    assert any("schemaVersion 99" in w for w in load_trace(odd).warnings)
