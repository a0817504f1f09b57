"""Budgets before allocation (issue 21 part 1): a gzip stream that inflates past its ceiling stops in one line
before it is held; a file that would be read whole is refused when it is larger than the memory available; the
event splitter's work is linear in a long event or a long run of whitespace.
Work is asserted as work (bytes inflated before the refusal, events kept, bytes searched), never as seconds: the
time budgets are in bench/bench_budgets.py.

Bombs are built without holding them: one compressed member repeated (a real 4 GB bomb in ~4 MB, written in
milliseconds), or gzip.open written in a loop under a lowered ceiling."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from fuzz_inputs import gzip_member, repeated_members
from independent import DATA
from servescope.errors import NotATrace
from servescope.trace import _frame, _gzip, _read, _split, load_trace
from work_counters import count_inflated, count_split_work

SMALL = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
EVENT = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":7,"args":{"device":0}}'
MB = 1 << 20
# Bytes a stream inflates at most before a bomb is refused: the projection starts at EARLY_BYTES and one piece
# (<= 2 x PIECE_BYTES, test_piece_sizes_shrink_with_the_ratio) may take it past.
REFUSED_WITHIN = _gzip.EARLY_BYTES + 2 * _gzip.PIECE_BYTES


def streamed_whitespace(path: Path, head: bytes, mb: int, tail: bytes) -> Path:
    """head + `mb` MB of spaces + tail through gzip.open in a loop (never held)."""
    chunk = b" " * MB
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(head)
        for _ in range(mb):
            fh.write(chunk)
        fh.write(tail)
    return path


@pytest.fixture
def low_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 24 MB floor and projection from 4 MB on: the ceiling logic at test size."""
    monkeypatch.setattr(_gzip, "SIZE_FLOOR_BYTES", 24 * MB)
    monkeypatch.setattr(_gzip, "EARLY_BYTES", 4 * MB)
    monkeypatch.delenv(_gzip.CEILING_ENV, raising=False)


def test_four_gigabytes_of_whitespace_in_members_stop_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's bomb at full size (4 GB of spaces in ~4 MB, repeated members): one line, after inflating at
    most REFUSED_WITHIN (~80 MB, 2% of it), once."""
    bomb = repeated_members(tmp_path / "bomb.json.gz", b'{"traceEvents": [' + EVENT, b" " * MB, 4096, b"]}")
    assert bomb.stat().st_size < 8 * MB
    inflated = count_inflated(monkeypatch)
    with pytest.raises(NotATrace, match=r"decompresses beyond 2\.1 GB .*; not read$") as err:
        load_trace(bomb)
    assert str(err.value).startswith(str(bomb))
    assert len(inflated) == 1 and _gzip.EARLY_BYTES <= max(inflated.values()) <= REFUSED_WITHIN


def test_many_identical_events_bomb_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """~2.6 GB of one repeated kernel (the issue: a Polars panic at 6 GB) stops before the events are kept: at most
    REFUSED_WITHIN inflated (3% of it) and the events in those bytes decoded, not the file's 28 million."""
    body = (EVENT + b",") * 10_000
    members = 2_600_000_000 // len(body)
    bomb = repeated_members(tmp_path / "many.json.gz", b'{"traceEvents": [', body, members, EVENT + b"]}")
    inflated = count_inflated(monkeypatch)
    rows: list[int] = []
    chunk_frame = _frame.chunk_frame
    monkeypatch.setattr(_read, "chunk_frame", lambda events, *a: rows.append(len(events)) or chunk_frame(events, *a))
    with pytest.raises(NotATrace, match="decompresses beyond"):
        load_trace(bomb)
    assert len(inflated) == 1 and max(inflated.values()) <= REFUSED_WITHIN
    assert sum(rows) <= REFUSED_WITHIN // len(EVENT) < members * 10_000 // 25


@pytest.mark.usefixtures("low_ceiling")
@pytest.mark.parametrize(("head", "tail"), [
    (b'{"traceEvents": [' + EVENT, b"]}"),  # after the last event
    (b'{"traceEvents": [' + EVENT + b",", EVENT + b"]}"),  # between events
    (b'{"traceEvents": [' + EVENT[:-1] + b', "x": 1', b"}]}"),  # inside an event
    (b"", b'{"traceEvents": [' + EVENT + b"]}"),  # before the document
])
def test_streamed_whitespace_bomb_under_a_lowered_ceiling(tmp_path: Path, head: bytes, tail: bytes) -> None:
    bomb = streamed_whitespace(tmp_path / "ws.json.gz", head, 64, tail)
    with pytest.raises(NotATrace, match=r"decompresses beyond 25 MB \(.*x so far.*; not read"):
        load_trace(bomb)


@pytest.mark.usefixtures("low_ceiling")
def test_below_the_ceiling_whitespace_still_loads(tmp_path: Path) -> None:
    """16 MB of spaces (under the 24 MB floor) is read: the ceiling refuses size, not shape."""
    ok = streamed_whitespace(tmp_path / "ok.json.gz", b'{"traceEvents": [' + EVENT + b",", 16, EVENT + b"]}")
    assert load_trace(ok).events.height == 2


@pytest.mark.usefixtures("low_ceiling")
def test_a_real_trace_passes_a_lowered_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ratio rule: a real trace (~10x) is under 200x its size whatever the floor."""
    monkeypatch.setattr(_gzip, "SIZE_FLOOR_BYTES", 1)
    monkeypatch.setattr(_gzip, "EARLY_BYTES", 1)
    assert load_trace(SMALL).events.height > 0


def test_ceiling_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_gzip.CEILING_ENV, "0.0001")  # 100 KB; the file inflates to ~0.5 MB
    with pytest.raises(NotATrace, match=rf"decompresses beyond 0.1 MB \({_gzip.CEILING_ENV}=0.0001\); not read"):
        load_trace(SMALL)
    monkeypatch.setenv(_gzip.CEILING_ENV, "not a number")  # ignored: the ratio rule
    assert load_trace(SMALL).events.height > 0


def test_exact_path_is_bounded_by_available_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact path holds the whole text: its ceiling is also the memory available (here 200 KB; the file
    inflates to ~0.5 MB)."""
    monkeypatch.setattr(_read, "available_memory_bytes", lambda: 200_000)
    monkeypatch.setattr(_gzip, "available_memory_bytes", lambda: 200_000)
    with pytest.raises(NotATrace, match=r"decompresses beyond 0.2 MB \(the 0\.2 MB of memory available\)"):
        _read.read_bytes(SMALL, [])
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(SMALL.read_bytes()))
    with pytest.raises(NotATrace, match=r"GB to read whole, more than the 0\.0 GB of memory available; not read"):
        _read.read_bytes(plain, [])
    assert load_trace(plain).events.height > 0  # the streaming path holds no whole file: it still reads


def test_truncated_bomb_is_refused_not_repaired(tmp_path: Path) -> None:
    """A bomb cut off mid-member fails the fast path; the exact path's ceiling refuses it in the same words."""
    data = repeated_members(tmp_path / "b.json.gz", b'{"traceEvents": [' + EVENT, b" " * MB, 4096, b"]}").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(NotATrace, match="decompresses beyond"):
        load_trace(cut)


def test_piece_sizes_shrink_with_the_ratio() -> None:
    """No single inflate call may hand back more than ~PIECE_BYTES (a 256 KB feed of a bomb was 264 MB)."""
    raw = gzip_member(b" " * (64 * MB))
    biggest = max(len(piece) for piece in _gzip.inflate_members(raw))
    assert biggest <= 2 * _gzip.PIECE_BYTES


@pytest.mark.parametrize("where", ["after", "between", "inside"])
def test_long_whitespace_runs_split_linearly_and_load(tmp_path: Path, where: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """8 MB of whitespace (past the separator span) at each place an event boundary can be: the events are read."""
    ws = b" " * (8 * MB)
    body = {"after": EVENT + b"," + EVENT + ws, "between": EVENT + b"," + ws + EVENT,
            "inside": EVENT + b"," + EVENT[:-1] + b', "x":' + ws + b"1}"}[where]
    path = tmp_path / "ws.json"
    path.write_bytes(b'{"traceEvents": [' + body + b"]}")
    work = count_split_work(monkeypatch)
    assert load_trace(path).events.height == 2
    # each search covers the new bytes and one separator span: the whitespace is searched once, not once per block
    assert len(work.searched) >= 4 and work.whole_reads == 0
    assert sum(work.searched) <= path.stat().st_size + len(work.searched) * _split.SEP_SPAN_BYTES
    monkeypatch.setattr(_split, "MAX_EVENT_BYTES", 2 * MB)  # longer than that: the exact path reads it
    assert load_trace(path).events.height == 2


def test_cut_search_starts_at_the_floor() -> None:
    pending = bytearray(EVENT + b", " + EVENT + b" " * 100)
    assert _split._last_event_end(pending) == (len(EVENT), len(EVENT) + 2)
    assert _split._last_event_end(pending, len(EVENT) + 1) is None  # the separator's `}` lies before the floor
