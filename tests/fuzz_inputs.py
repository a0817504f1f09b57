"""Mutations of real traces for the fuzzing harness (tests/fuzz/test_fuzz_*.py) and `make fuzz`.

Seeds are small real traces from tests/data/traces (provenance and licences there). A mutation is a function
(seed JSON document, random.Random) → bytes of a file: JSON-level ones change one thing an attacker or a broken
profiler could (a missing key, a wrong type, a huge or non-finite number, a deep nesting, markup or control
characters in a name), byte-level ones damage the encoded file (flips, truncation, invalid UTF-8, garbage).
The same functions drive Hypothesis (through a drawn seed) and a plain random loop, so a crasher found by one
is replayed by the other.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

TRACES = Path(__file__).parent / "data" / "traces"
SEEDS = (
    TRACES / "kineto/docs_traces/before_fix_trace.json",
    TRACES / "tracelens/torch_compile_triton/trace.json.gz",
    TRACES / "hta/triton_example/triton_example.json.gz",
    TRACES / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    TRACES / "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
    TRACES / "hta/trace_file_list/inference_rank_1.json.gz",
    TRACES / "tracelens/inference/vllm_decode_full/graph_execution.json.gz",
)

Doc = dict[str, Any]


@cache
def seed_doc(index: int) -> Doc:
    """A seed as a JSON document; python_function events dropped to keep cases fast (the loader drops them)."""
    path = SEEDS[index]
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    return doc


MARKUP_NAMES = ("[/]", "[bold red]x[/bold red]", "[link=http://x]k[/link]", "[/bold]", "a[b]c[/]", "\\[x]",
                "[red", "]]][[[", "\x1b[31mred\x1b[0m", "\x00\x01\x07\x7f", "名前", "\u202ereversed", "")
WEIRD_VALUES: tuple[Any, ...] = (
    None, True, [], {}, [1, 2], {"a": 1}, "", "abc", "NaN", "-1", 2**64, 2**70, -(2**70), 10**400, 1e308, -1e308,
    1.7976931348623157e308, 5e-324, -1, 0, 1 << 63, -(1 << 63), 1e18, 1.5,
)
# Bare tokens that are not JSON; written into the text, not the document.
BARE_TOKENS = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "123456789012345678901234567890", "N/A", "nan")
EVENT_KEYS = ("name", "ph", "cat", "ts", "dur", "pid", "tid", "args")
ARG_KEYS = ("correlation", "External id", "device", "stream", "grid", "block", "blocks per SM", "name",
            "Collective name", "In msg nelems", "Group size", "dtype")
NAME_TARGETS = ("kernel", "user_annotation", "gpu_user_annotation", "cpu_op", "cuda_runtime")


def _dump(doc: Any) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def _pick_event(doc: Doc, rng: random.Random, cats: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    events = [e for e in doc["traceEvents"] if isinstance(e, dict) and (cats is None or e.get("cat") in cats)]
    return rng.choice(events) if events else None


def drop_key(doc: Doc, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 5)):
        ev = _pick_event(doc, rng)
        if ev is not None:
            ev.pop(rng.choice(EVENT_KEYS), None)
    return _dump(doc)


def wrong_type(doc: Doc, rng: random.Random) -> bytes:
    for _ in range(rng.randint(1, 5)):
        ev = _pick_event(doc, rng)
        if ev is None:
            continue
        if rng.random() < 0.5 or not isinstance(ev.get("args"), dict):
            ev[rng.choice(EVENT_KEYS)] = rng.choice(WEIRD_VALUES)
        else:
            ev["args"][rng.choice(ARG_KEYS)] = rng.choice(WEIRD_VALUES)
    return _dump(doc)


def null_name(doc: Doc, rng: random.Random) -> bytes:
    """A null, missing or non-string name on kernel / annotation events (steps, findings, report read names)."""
    for _ in range(rng.randint(1, 4)):
        ev = _pick_event(doc, rng, NAME_TARGETS) or _pick_event(doc, rng)
        if ev is None:
            continue
        choice = rng.random()
        if choice < 0.4:
            ev["name"] = None
        elif choice < 0.7:
            ev.pop("name", None)
        else:
            ev["name"] = rng.choice((1, 2.5, [], {}, True))
    return _dump(doc)


def markup_name(doc: Doc, rng: random.Random) -> bytes:
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict) and rng.random() < 0.3:
        props[0]["name"] = rng.choice(MARKUP_NAMES)  # the device name is printed in the rank tables too
    for _ in range(rng.randint(1, 6)):
        ev = _pick_event(doc, rng, NAME_TARGETS) or _pick_event(doc, rng)
        if ev is not None:
            base = ev.get("name") if isinstance(ev.get("name"), str) else ""
            ev["name"] = rng.choice((rng.choice(MARKUP_NAMES), base + rng.choice(MARKUP_NAMES)))
    return _dump(doc)


def huge_number(doc: Doc, rng: random.Random) -> bytes:
    """Huge / non-finite numbers in timestamps, durations, ids and deviceProperties, as text tokens."""
    doc = copy.deepcopy(doc)
    marker = "@@BARE@@"
    targets = [ev for ev in doc["traceEvents"] if isinstance(ev, dict)]
    for _ in range(rng.randint(1, 4)):
        where = rng.random()
        if where < 0.35 and doc.get("deviceProperties"):
            props = rng.choice(doc["deviceProperties"])
            if isinstance(props, dict):
                props[rng.choice(("id", "numSms", "maxThreadsPerMultiprocessor", "totalGlobalMem", "name"))] = marker
        elif where < 0.45:
            doc["distributedInfo"] = {"rank": marker, "world_size": marker}
        elif targets:
            ev = rng.choice(targets)
            if rng.random() < 0.6:
                ev[rng.choice(("ts", "dur", "pid", "tid"))] = marker
            elif isinstance(ev.get("args"), dict):
                ev["args"][rng.choice(ARG_KEYS)] = marker
    text = json.dumps(doc)
    while f'"{marker}"' in text:
        text = text.replace(f'"{marker}"', rng.choice(BARE_TOKENS), 1)
    return text.encode()


def deep_nesting(doc: Doc, rng: random.Random) -> bytes:
    depth = rng.choice((999, 1001, 1500, 5000, 20000))
    opener, closer = rng.choice((("[", "]"), ('{"a":', "}")))
    nested = opener * depth + "1" + closer * depth
    text = _dump(doc).decode()
    where = rng.random()
    if where < 0.4:
        return text.replace('"args": {', f'"args": {{"deep": {nested}, ', 1).encode()
    if where < 0.7:
        return text.replace('"traceEvents": [', f'"traceEvents": [{nested}, ', 1).encode()
    return (opener * depth).encode() if where < 0.85 else nested.encode()


def top_level(doc: Doc, rng: random.Random) -> bytes:
    key = rng.choice(("traceEvents", "deviceProperties", "distributedInfo", "schemaVersion", "displayTimeUnit"))
    doc[key] = rng.choice(WEIRD_VALUES + ([{"id": 0, "numSms": 2**70}], [None], [[1]], "ns"))
    return _dump(doc)


def _encoded(doc: Doc) -> bytearray:
    return bytearray(_dump(doc))


def byte_flips(doc: Doc, rng: random.Random) -> bytes:
    data = _encoded(doc)
    for _ in range(rng.randint(1, 20)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def truncate(doc: Doc, rng: random.Random) -> bytes:
    data = _encoded(doc)
    return bytes(data[: rng.randrange(len(data))])


def invalid_utf8(doc: Doc, rng: random.Random) -> bytes:
    data = _encoded(doc)
    for _ in range(rng.randint(1, 10)):
        at = rng.randrange(len(data))
        data[at:at] = rng.choice((b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80\x80", b"\\ud800"))
    return bytes(data)


def garbage(doc: Doc, rng: random.Random) -> bytes:
    data = _encoded(doc)
    at = rng.randrange(len(data))
    junk = rng.choice((b"}", b"]", b",", b"{", b"[", b'"', b"\\", b"\x00", b":", b"null", b"\n\t\r"))
    data[at:at] = junk * rng.randint(1, 5)
    return bytes(data)


def gzip_damage(doc: Doc, rng: random.Random) -> bytes:
    data = bytearray(gzip.compress(_dump(doc), compresslevel=1))
    if rng.random() < 0.5:
        return bytes(data[: rng.randrange(2, len(data))])
    for _ in range(rng.randint(1, 5)):
        data[rng.randrange(10, len(data))] = rng.randrange(256)
    return bytes(data)


MUTATIONS: tuple[Callable[[Doc, random.Random], bytes], ...] = (
    drop_key, wrong_type, null_name, markup_name, huge_number, deep_nesting, top_level, byte_flips, truncate,
    invalid_utf8, garbage, gzip_damage,
)


def mutate(seed_index: int, mutation: int, rng: random.Random) -> bytes:
    """The bytes of one fuzzed file: seed `seed_index` mutated by MUTATIONS[mutation] with `rng`."""
    return MUTATIONS[mutation](copy.deepcopy(seed_doc(seed_index)), rng)


def check_cli(args: list[str]) -> str | None:
    """Run `servescope ARGS` in-process; None when it behaved (exit 0 with output on stdout, or exit 1 with
    exactly one `servescope: …` line on stderr), else what went wrong (traceback, crash, chatter)."""
    import warnings

    from click.testing import CliRunner

    from servescope.cli import main

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, args)
    numpy_like = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(result.exception))
        return f"crash {type(result.exception).__name__}: {result.exception}\n{tb}"
    if numpy_like:
        return f"RuntimeWarning leaked: {numpy_like[0].message} ({numpy_like[0].filename}:{numpy_like[0].lineno})"
    err_lines = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code == 0:
        if not result.stdout.strip():
            return "exit 0 without output"
        bad = [line for line in err_lines if not line.startswith(("servescope: warning: ", "servescope: note: "))]
        return f"stderr chatter on success: {bad[:2]}" if bad else None
    if result.exit_code == 1:
        if len(err_lines) != 1 or not err_lines[0].startswith("servescope: "):
            return f"exit 1 without exactly one error line: {err_lines[:3]}"
        return None
    return f"exit code {result.exit_code}: {err_lines[:3]}"


# --- size: gzip bombs written member by member (a test never holds the inflated bytes) -----------------------

def gzip_member(data: bytes) -> bytes:
    """One gzip member of `data`, at the best ratio."""
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def repeated_members(path: Path, head: bytes, body: bytes, count: int, tail: bytes) -> Path:
    """head, then `body` `count` times (one member each, compressed once), then tail: count × len(body) bytes."""
    one = gzip_member(body)
    with path.open("wb") as fh:
        fh.write(gzip_member(head))
        for _ in range(count):
            fh.write(one)
        fh.write(gzip_member(tail))
    return path


# --- the other input surfaces (issue 32): result files, replays, engine logs, routing, plans, campaign logs ------
# Each seed is real or made the way its tool writes it; a mutation takes the seed's text and returns bytes. Text-level
# mutations work on any format (JSON, JSON lines, CSV, logs); value-level ones walk a JSON document and change one
# value to something hostile (a huge or non-finite number, a string, a list, a deep nesting), written as bare tokens
# where JSON has none (NaN, 1e400, 5000 digits).

DATA = Path(__file__).parent / "data"
VLLM_RESULT: dict[str, Any] = {
    "date": "20250101-120000", "endpoint_type": "openai", "num_prompts": 100, "request_rate": "inf",
    "max_concurrency": 16, "duration": 50.0, "completed": 100, "total_input_tokens": 102400,
    "total_output_tokens": 12800, "request_throughput": 2.0, "output_throughput": 256.0, "mean_ttft_ms": 120.0,
    "median_ttft_ms": 100.0, "p99_ttft_ms": 400.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0, "p99_tpot_ms": 30.0,
    "mean_itl_ms": 20.0, "median_itl_ms": 18.0, "p99_itl_ms": 60.0, "mean_e2el_ms": 2700.0, "p99_e2el_ms": 3100.0}
HOSTILE_TOKENS = ("NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 5000, "9" * 400, "-1", "0", "1e300",
                  '"abc"', "null", "true", "[]", "[1, [2]]", "{}", '"1.2.3"', "[" * 3000 + "]" * 3000,
                  '"\\u001b]0;PWNED\\u0007"', '"=HYPERLINK(1)"')
HOSTILE_LOG_NUMBERS = ("1.2.3", "1,,2", ".", "9" * 60, "-1", "NaN", "1e400", "", "0x10", "1" + ",000" * 30)
ENGINE_LOGS = (DATA / "engine_logs" / "vllm_kimi_k25_tp8.log", DATA / "engine_logs" / "sglang_deepseek_mtp.log")
SGLANG_RESULTS = tuple(sorted((DATA / "bench_serve").glob("*.jsonl")))


def replay_seed(n: int = 24) -> dict[str, Any]:
    """A detailed `vllm bench serve --save-detailed` result of n requests (epoch send times, as the tool writes)."""
    rng = random.Random(n)
    start, isl, osl = [1.7e9 + i * 0.25 for i in range(n)], [rng.randint(50, 900) for _ in range(n)], \
        [rng.randint(2, 40) for _ in range(n)]
    return {"date": "20261201-120000", "backend": "vllm", "completed": n, "start_times": start, "input_lens": isl,
            "output_lens": osl, "ttfts": [0.05] * n, "itls": [[0.01] * (o - 1) for o in osl]}


def routing_seed(layers: int = 2, experts: int = 128) -> list[list[int]]:
    rng = random.Random(layers)
    return [[rng.randint(0, 5000) for _ in range(experts)] for _ in range(layers)]


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (dict keys and list indices), lists sampled to 8 items."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i in range(0, len(doc), max(1, len(doc) // 8)):
            out += _paths(doc[i], (*prefix, i))
    return out


def hostile_value(doc: Any, rng: random.Random) -> bytes:
    """One to three values of a JSON document replaced by hostile tokens (written bare: NaN, 1e400, 5000 digits)."""
    doc = copy.deepcopy(doc)
    marker, tokens = "@@HOSTILE@@", []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice([p for p in _paths(doc) if p]) if _paths(doc)[1:] else ()
        if not path:
            break
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = f"{marker}{len(tokens)}"
        tokens.append(rng.choice(HOSTILE_TOKENS))
    text = json.dumps(doc)
    for i, tok in enumerate(tokens):
        text = text.replace(f'"{marker}{i}"', tok, 1)
    return text.encode()


def _text_damage(data: bytes, rng: random.Random) -> bytes:
    """Byte-level damage to any text: flips, truncation, invalid UTF-8, a BOM, NULs, one huge line, CR line ends."""
    buf = bytearray(data) or bytearray(b" ")
    kind = rng.randrange(8)
    if kind == 0:
        for _ in range(rng.randint(1, 20)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == 1:
        return bytes(buf[: rng.randrange(len(buf))])
    elif kind == 2:
        at = rng.randrange(len(buf))
        buf[at:at] = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"))
    elif kind == 3:
        return b"\xef\xbb\xbf" + bytes(buf)
    elif kind == 4:
        at = rng.randrange(len(buf))
        buf[at:at] = b"\x00" * rng.randint(1, 64)
    elif kind == 5:
        return bytes(buf).replace(b"\n", b" ") + b"x" * rng.choice((1000, 100_000, 400_000))
    elif kind == 6:
        return bytes(buf).replace(b"\n", b"\r")
    else:
        at = rng.randrange(len(buf))
        buf[at:at] = rng.choice((b"}", b"]", b",", b"{", b'"', b"\\", b":", b"\n", b"\x1b[2J", b"\x1b]0;T\x07"))
    return bytes(buf)


def duplicate_keys(text: str, rng: random.Random) -> bytes:
    """A JSON object with a key written twice, the second time hostile."""
    at = text.find('{"')
    if at < 0:
        return text.encode()
    key = text[at + 1:].split('"', 2)[1]
    return (text[:at + 1] + f'"{key}": {rng.choice(HOSTILE_TOKENS)}, ' + text[at + 1:]).encode()


def mutate_json(doc: Any, rng: random.Random, lines: bool = False) -> bytes:
    """A JSON (or, `lines`, one-object-per-line) seed mutated at the value, key or byte level."""
    choice = rng.random()
    if choice < 0.55:
        data = hostile_value(doc, rng)
    elif choice < 0.7:
        data = duplicate_keys(json.dumps(doc), rng)
    else:
        data = _text_damage(json.dumps(doc).encode(), rng)
    return data + (b"\n" if lines and rng.random() < 0.5 else b"")


def mutate_log(text: str, rng: random.Random) -> bytes:
    """An engine log with numbers after the keys the reader looks for made hostile, keys repeated on one huge
    line, or the bytes damaged."""
    choice = rng.random()
    if choice < 0.5:
        import re

        numbers = list(re.finditer(r"\d[\d,.]*", text))
        for m in rng.sample(numbers, min(len(numbers), rng.randint(1, 4))):
            text = text.replace(m.group(0), rng.choice(HOSTILE_LOG_NUMBERS), 1)
        return text.encode()
    if choice < 0.75:
        line = rng.choice([x for x in text.splitlines() if x.strip()])
        return ((line + " ") * rng.choice((10, 2000, 8000))).encode()
    return _text_damage(text.encode(), rng)
