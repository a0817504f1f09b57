"""Fuzzing `servescope trace` with mutations of real traces (tests/fuzz_inputs.py), plus every crasher found.

Each case writes one mutated file and drives the CLI in-process: it must exit 0 with a result (warnings allowed,
on stderr as `servescope: warning: …`) or exit 1 with exactly one `servescope: …` line, never a traceback, and
no NumPy RuntimeWarning may escape. CI runs a bounded budget (FUZZ_SCALE=1: 370 cases here, 160 in
test_fuzz_args.py, 530 in all); `make fuzz` runs FUZZ_SCALE=28 (10,360 trace cases, 14,840 in all).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_inputs import MUTATIONS, SEEDS, check_cli, mutate, repeated_members, seed_doc
from servescope.cli import main
from servescope.errors import ServescopeError
from servescope.trace import load_trace

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=SCALE == 1, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BYTE_LEVEL = tuple(i for i, m in enumerate(MUTATIONS) if m.__name__ in (
    "byte_flips", "truncate", "invalid_utf8", "garbage", "gzip_damage", "deep_nesting"))
RANK0 = Path(__file__).parents[1] / "data/traces/hta/trace_filter/sampled_rank-0.json.gz"

cases = st.tuples(st.integers(0, len(SEEDS) - 1), st.integers(0, len(MUTATIONS) - 1), st.integers(0, 2**32))


def _write(folder: Path, data: bytes, stem: str = "case") -> Path:
    path = folder / (f"{stem}.json.gz" if data[:2] == b"\x1f\x8b" else f"{stem}.json")
    path.write_bytes(data)
    return path


@settings(FUZZ, max_examples=200 * SCALE)
@given(st.integers(0, len(SEEDS) - 1), st.sampled_from(BYTE_LEVEL), st.integers(0, 2**32))
def test_loader_survives_damaged_bytes(seed: int, mutation: int, rng_seed: int) -> None:
    """The loader alone (cheap): a Trace honouring the contract's columns, or a ServescopeError."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), mutate(seed, mutation, random.Random(rng_seed)))
        try:
            trace = load_trace(path)
        except ServescopeError as exc:
            assert str(exc).startswith(str(path)), exc
            return
        assert trace.events["name"].null_count() == 0
        assert trace.events["dur_us"].min() is None or trace.events["dur_us"].min() >= 0  # type: ignore[operator]


@settings(FUZZ, max_examples=150 * SCALE)
@given(cases, st.booleans())
def test_trace_cli_survives_mutations(case: tuple[int, int, int], as_json: bool) -> None:
    seed, mutation, rng_seed = case
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), mutate(seed, mutation, random.Random(rng_seed)))
        problem = check_cli(["trace", str(path), *(["--json"] if as_json else [])])
    assert problem is None, f"{MUTATIONS[mutation].__name__} on {SEEDS[seed].name}, rng {rng_seed}: {problem}"


@settings(FUZZ, max_examples=20 * SCALE)
@given(cases, st.booleans())
def test_rank_folder_survives_a_broken_file(case: tuple[int, int, int], as_json: bool) -> None:
    """One mutated file among good ranks never sinks the folder (compact cross-rank text view or JSON)."""
    seed, mutation, rng_seed = case
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copyfile(SEEDS[2], folder / "rank0.json.gz")  # a small good rank (HTA's triton example)
        _write(folder, mutate(seed, mutation, random.Random(rng_seed)), "rank1")
        problem = check_cli(["trace", str(folder), *(["--json"] if as_json else [])])
    assert problem is None, f"{MUTATIONS[mutation].__name__} on {SEEDS[seed].name}, rng {rng_seed}: {problem}"


# --- crashers found by the harness, kept as regression tests ---------------------------------------------------

def _doc_with(change: dict[str, object], seed: int = 6) -> dict[str, object]:
    doc = json.loads(json.dumps(seed_doc(seed)))
    doc.update(change)
    return doc


def _kernel_named(name: object, seed: int = 6) -> dict[str, object]:
    doc = json.loads(json.dumps(seed_doc(seed)))
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev["name"] = name
    return doc


@pytest.mark.parametrize("text", [
    '{"traceEvents": [' + "[" * 3000 + "]" * 3000 + "]}",
    "[" * 3000 + "]" * 3000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    '{"traceEvents": [' + "[" * 3000,
])
def test_deep_nesting_is_one_line(tmp_path: Path, text: str) -> None:
    """RecursionError in the loader (msgspec recurses per level) → NotATrace, one line."""
    path = tmp_path / "deep.json"
    path.write_text(text)
    assert check_cli(["trace", str(path)]) is None


def test_deep_nesting_in_args_of_one_event(tmp_path: Path) -> None:
    doc = json.dumps(seed_doc(6)).replace('"args": {', '"args": {"deep": ' + "[" * 3000 + "]" * 3000 + ", ", 1)
    path = tmp_path / "deep_args.json"
    path.write_text(doc)
    assert check_cli(["trace", str(path), "--json"]) is None


def test_deep_file_in_rank_folder_is_skipped(tmp_path: Path) -> None:
    shutil.copyfile(RANK0, tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json").write_text("[" * 5000 + "]" * 5000)
    assert check_cli(["trace", str(tmp_path)]) is None
    from servescope.analysis.analyze import analyze_trace

    a = analyze_trace(tmp_path)
    assert [b.rank for b in a.ranks] == [0]
    assert any(w.startswith("rank1.json: skipped (JSON nested too deeply") for w in a.warnings), a.warnings


@pytest.mark.parametrize("name", [None, "[/]", "[bold]x[/bold]", "a[b]c[/]"])
def test_kernel_names_null_or_markup(tmp_path: Path, name: object) -> None:
    """Null names crashed findings (`k.name[:80]`); `[/]` crashed the Rich text report; names print verbatim."""
    path = tmp_path / "names.json"
    path.write_text(json.dumps(_kernel_named(name)))
    assert check_cli(["trace", str(path)]) is None
    if isinstance(name, str):
        from click.testing import CliRunner

        from servescope.cli import main

        out = CliRunner().invoke(main, ["trace", str(path), "--top", "3"]).stdout
        assert name in out


def test_null_name_on_annotations(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(seed_doc(6)))
    for ev in doc["traceEvents"]:
        if ev.get("cat") in ("user_annotation", "gpu_user_annotation", "cpu_op", "cuda_runtime"):
            ev.pop("name", None)
    path = tmp_path / "anon.json"
    path.write_text(json.dumps(doc))
    assert check_cli(["trace", str(path)]) is None
    assert any("without a readable name" in w for w in load_trace(path).warnings)


@pytest.mark.parametrize("token", ["123456789012345678901234567890", "1e308", "-1e308", "1e400", "Infinity"])
def test_huge_numbers_in_device_properties(tmp_path: Path, token: str) -> None:
    """2**70 or 1e308 in deviceProperties overflowed Polars' Int64 column."""
    doc = _doc_with({})
    text = json.dumps(doc).replace('"numSms": 304', f'"numSms": {token}').replace('"id": 0,', f'"id": {token},')
    path = tmp_path / "huge.json"
    path.write_text(text)
    assert check_cli(["trace", str(path)]) is None
    assert check_cli(["trace", str(path), "--json"]) is None


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_timestamps_no_runtime_warning(tmp_path: Path, token: str) -> None:
    doc = json.loads(json.dumps(seed_doc(6)))
    kernels = [ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel"]
    for ev in kernels[:5]:
        ev["ts"], ev["dur"] = "@@", "@@"
    path = tmp_path / "nonfinite.json"
    path.write_text(json.dumps(doc).replace('"@@"', token))
    assert check_cli(["trace", str(path)]) is None


def test_gzip_of_deep_nesting(tmp_path: Path) -> None:
    path = tmp_path / "deep.json.gz"
    path.write_bytes(gzip.compress(b"[" * 4000))
    assert check_cli(["trace", str(path)]) is None


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("ts", ["1.7976931348623157e+308", "-1.7976931348623157e+308", "1e17", "1e400"])
def test_absurd_timestamp_is_dropped(tmp_path: Path, ts: str) -> None:
    """Found by the harness (case 102178): one kernel at ts 1.8e308 overflowed the interval union
    (RuntimeWarning in intervals.py); now the event is dropped with a warning."""
    doc = json.loads(json.dumps(seed_doc(6)))
    kernel = next(ev for ev in doc["traceEvents"] if ev.get("cat") == "kernel")
    kernel["ts"] = "@@"
    path = tmp_path / "absurd.json"
    path.write_text(json.dumps(doc).replace('"@@"', ts))
    assert check_cli(["trace", str(path)]) is None
    trace = load_trace(path)
    n_kernels = sum(1 for ev in doc["traceEvents"] if ev.get("cat") == "kernel")
    assert int((trace.events["kind"] == "kernel").sum()) == n_kernels - 1
    expected = "numbers out of range: 1 values" if ts == "1e400" else "beyond 1e+17 µs"  # 1e400: read as null
    assert any(expected in w for w in trace.warnings), trace.warnings


# --- size (issue 21 part 6): bombs, repeated members, many identical events, long event counts ------------------
# Bombs are written without being held: one compressed member repeated (full size, e.g. 4 GB in ~4 MB) or a
# streamed gzip under a lowered ceiling (trace._gzip constants), so a case costs well under a second.

_EVENT = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":7,"args":{"device":0}}'
_WS_PLACES = {  # (head, tail) around a run of whitespace
    "after the last event": (b'{"traceEvents": [' + _EVENT, b"]}"),
    "between events": (b'{"traceEvents": [' + _EVENT + b",", _EVENT + b"]}"),
    "inside an event": (b'{"traceEvents": [' + _EVENT[:-1] + b', "x": 1', b"}]}"),
    "before the document": (b"", b'{"traceEvents": [' + _EVENT + b"]}"),
    "after the document": (b'{"traceEvents": [' + _EVENT + b"]}", b""),
    "a bare list": (b"[" + _EVENT, b"]"),
}


def _timed_cli(args: list[str], limit_s: float = 10.0) -> str | None:
    import time

    start = time.perf_counter()
    problem = check_cli(args)
    took = time.perf_counter() - start
    return problem or (f"took {took:.1f} s (limit {limit_s} s)" if took > limit_s else None)


@pytest.mark.parametrize("place", list(_WS_PLACES))
def test_whitespace_bomb_in_members_is_one_line(tmp_path: Path, place: str) -> None:
    """4 GB of spaces in 1 MB members (the issue: MemoryError after 22 s, or 120 s with 18 members)."""
    head, tail = _WS_PLACES[place]
    bomb = repeated_members(tmp_path / "bomb.json.gz", head, b" " * (1 << 20), 4096, tail)
    problem = _timed_cli(["trace", str(bomb), "--json"])
    assert problem is None, f"{place}: {problem}"


@settings(FUZZ, max_examples=6 * SCALE)
@given(st.sampled_from(list(_WS_PLACES)), st.integers(1, 48), st.sampled_from((1, 4, 16)), st.booleans())
def test_streamed_whitespace_under_a_lowered_ceiling(place: str, mb: int, members: int, as_json: bool) -> None:
    """Whitespace of 1-48 MB in 1-16 members under a 24 MB floor: a result below it, one line above it."""
    from unittest import mock

    from servescope.trace import _gzip

    head, tail = _WS_PLACES[place]
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(_gzip, "SIZE_FLOOR_BYTES", 24 << 20), \
            mock.patch.object(_gzip, "EARLY_BYTES", 4 << 20):
        path = repeated_members(Path(tmp) / "ws.json.gz", head, b" " * ((mb << 20) // members), members, tail)
        problem = _timed_cli(["trace", str(path), *(["--json"] if as_json else [])], 5.0)
    assert problem is None, f"{place}, {mb} MB in {members} members: {problem}"


def test_many_identical_events_bomb_is_one_line(tmp_path: Path) -> None:
    """~2.6 GB of one repeated kernel in ~9 MB (the issue: a Polars PanicException after 45 s at 6.1 GB)."""
    body = (_EVENT + b",") * 10_000
    bomb = repeated_members(tmp_path / "many.json.gz", b'{"traceEvents": [', body, 2_600_000_000 // len(body), _EVENT + b"]}")
    assert _timed_cli(["trace", str(bomb), "--json"]) is None


@pytest.mark.parametrize("n_events", [1, 50_000])
def test_long_event_counts_give_a_result(tmp_path: Path, n_events: int) -> None:
    """Identical events well under the ceiling (a real, if dull, trace): a result, in members or not."""
    one = _EVENT + b","
    path = repeated_members(tmp_path / "n.json.gz", b'{"traceEvents": [', one * 1000, n_events // 1000, _EVENT + b"]}")
    result = CliRunner().invoke(main, ["trace", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    assert check_cli(["trace", str(path), "--json"]) is None


def test_repeated_seed_members_and_a_rank_folder_with_a_bomb(tmp_path: Path) -> None:
    """A real seed split over many members loads like the seed; a bomb among good ranks is skipped with its
    reason, never sinking the folder."""
    text = json.dumps(seed_doc(2)).encode()
    step = max(1, len(text) // 200)
    split = tmp_path / "split.json.gz"
    split.write_bytes(b"".join(gzip.compress(text[i:i + step], 1) for i in range(0, len(text), step)))
    assert load_trace(split).events.height == load_trace(SEEDS[2]).events.height
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copyfile(SEEDS[2], folder / "rank0.json.gz")
    repeated_members(folder / "rank1.json.gz", *_WS_PLACES["between events"][:1], b" " * (1 << 20), 4096,
             _WS_PLACES["between events"][1])
    result = CliRunner().invoke(main, ["trace", str(folder), "--json"])
    assert result.exit_code == 0, result.stderr
    assert "decompresses beyond" in result.stdout + result.stderr
