"""Byte-level repairs for damaged Kineto JSON, each reporting what it changed as a warning.

What it does: given the bytes and msgspec's DecodeError message, picks one repair and returns new bytes:
invalid UTF-8 → U+FFFD; lone UTF-16 surrogate escapes → \\ufffd; raw control characters → spaces;
bare `N/A`, `NaN`, `Infinity`, `undefined` values and numbers beyond the float range (`1e400`) → null;
trailing commas removed; other unreadable
bytes → the event holding them dropped (up to 3 times); a truncated or still unreadable tail → cut back
to the last complete event and the brackets closed. Each repair runs at most once per file (event
drops 3 times; the tail cut may repeat, always further back), and the caller stops after 12 rounds,
so a file either converges or is reported as not a trace.
What it does not do: repairs on the fast path — clean files never reach this module. Integers beyond
int64 (e.g. `Comms Id`) need no repair: msgspec reads them as Python ints and `_frame.py` nulls them.
"""

from __future__ import annotations

import math
import re

import msgspec

# JSON bytes: bytes for plain files, bytearray when gunzipped (see _read._gunzip).
Buffer = bytes | bytearray
BOM = b"\xef\xbb\xbf"
_OFFSET = re.compile(r"\(byte (\d+)\)")
_CONTROL = bytes(range(32))
_CONTROL_NOT_WS = bytes(c for c in range(32) if c not in (9, 10, 13))
_TO_SPACE = bytes.maketrans(_CONTROL, b" " * 32)
_BARE = re.compile(rb"(?<=[:,\[])(\s*)(?:N/A|NaN|nan|-?Infinity|-?inf|None|undefined)(?=\s*[,\]}])")
_TRAILING_COMMA = re.compile(rb",(\s*[\]}])")
# A number with a 3+ digit positive exponent or 309+ digits before its decimal point: may exceed the float range.
_BIG_NUMBER = re.compile(rb"(?<=[:,\[])(\s*)(-?(?:\d+(?:\.\d*)?[eE]\+?\d{3,}|\d{309,}\.\d*))(?=\s*[,\]}])")
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = re.compile(
    rb"(?:" + _HIGH + rb"(?!" + _LOW + rb"))|(?:(?<!" + _HIGH + rb")" + _LOW + rb")"
)
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_END = re.compile(rb"\}(?=\s*,\s*\{)")
_TAIL_WINDOW = 1 << 20
_TAIL_TRIES = 8
MAX_DROPS = 3  # single bad events dropped before falling back to cutting the tail


class _Counted(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


_PAD = b" \t\r\n\x00"


def strip_bom_and_padding(buf: Buffer) -> Buffer:
    """Drop a UTF-8 BOM and surrounding whitespace / NUL padding (files cut while preallocated).
    Copies only when there is something to strip (a bytearray strip always copies)."""
    if buf[:8].lstrip().startswith(BOM):
        buf = buf.lstrip()[len(BOM) :]
    if buf[:1] in _PAD or buf[-1:] in _PAD:
        return buf.strip(_PAD)
    return buf


def repair(buf: Buffer, message: str, done: set[str], warnings: list[str]) -> Buffer | None:
    """One repair chosen from msgspec's error `message`; None when nothing more can be done."""
    match = _OFFSET.search(message)
    offset = int(match.group(1)) if match else len(buf)
    bad = buf[offset : offset + 1]
    if "UTF-8" in message and "utf8" not in done:
        done.add("utf8")
        return _fix_utf8(buf, warnings)
    if "surrogate" in message and "surrogate" not in done:
        done.add("surrogate")
        return _fix_surrogates(buf, warnings)
    if bad and bad[0] < 32 and "control" not in done:
        done.add("control")
        return _fix_control(buf, warnings)
    if bad and bad in b"NnIiu-" and "bare" not in done:
        done.add("bare")
        fixed = _fix_bare(buf, warnings)
        if fixed is not None:
            return fixed
    if "out of range" in message and "range" not in done:
        done.add("range")
        fixed = _fix_out_of_range(buf, warnings)
        if fixed is not None:
            return fixed
    if "trailing comma" in message and "comma" not in done:
        done.add("comma")
        return _fix_trailing_commas(buf, warnings)
    truncated = "truncated" in message
    n_drops = sum(1 for d in done if d.startswith("drop"))
    if not truncated and n_drops < MAX_DROPS:
        fixed = _drop_event(buf, offset, warnings)
        if fixed is not None:
            done.add(f"drop{n_drops}")
            return fixed
    return cut_tail(buf, len(buf) if truncated else offset, truncated, warnings)


def _drop_event(buf: Buffer, offset: int, warnings: list[str]) -> Buffer | None:
    """Remove the one event holding unreadable bytes at `offset` (from the end of the event before
    it to the end of that event), so one bad event does not cost the rest of the file."""
    before = [m.start() for m in _EVENT_END.finditer(buf, max(0, offset - _TAIL_WINDOW), offset)]
    after = _EVENT_END.search(buf, offset)
    if not before or after is None:
        return None
    warnings.append(f"unreadable JSON at byte {offset:,}: dropped the event there")
    return buf[: before[-1] + 1] + buf[after.start() + 1 :]


def _fix_utf8(buf: Buffer, warnings: list[str]) -> Buffer:
    text = buf.decode("utf-8", errors="replace")
    n_bad = text.count("\ufffd") - buf.count("\ufffd".encode())
    warnings.append(f"invalid UTF-8: replaced {n_bad:,} bad byte sequences with U+FFFD")
    return text.encode("utf-8")


def _fix_surrogates(buf: Buffer, warnings: list[str]) -> Buffer:
    fixed, n = _LONE_SURROGATE.subn(rb"\\ufffd", buf)
    warnings.append(f"invalid \\u escapes: replaced {n:,} lone UTF-16 surrogates with U+FFFD")
    return fixed


def _fix_control(buf: Buffer, warnings: list[str]) -> Buffer:
    n = len(buf) - len(buf.translate(None, _CONTROL_NOT_WS))
    warnings.append(f"control characters: replaced {n:,} raw control characters with spaces")
    return buf.translate(_TO_SPACE)


def _fix_bare(buf: Buffer, warnings: list[str]) -> Buffer | None:
    fixed, n = _BARE.subn(rb"\1null", buf)
    if n == 0:
        return None
    warnings.append(f"bare non-JSON values: {n:,} unquoted N/A / NaN / Infinity read as null")
    return fixed


def _fix_out_of_range(buf: Buffer, warnings: list[str]) -> Buffer | None:
    """Numbers beyond the float range (`1e400`; msgspec: "Number out of range") → null."""
    n = 0

    def null_if_inf(m: re.Match[bytes]) -> bytes:
        nonlocal n
        if math.isinf(float(m.group(2))):
            n += 1
            return m.group(1) + b"null"
        return m.group(0)

    fixed = _BIG_NUMBER.sub(null_if_inf, buf)
    if n == 0:
        return None
    warnings.append(f"numbers out of range: {n:,} values beyond ±1.8e308 read as null")
    return fixed


def _fix_trailing_commas(buf: Buffer, warnings: list[str]) -> Buffer:
    fixed, n = _TRAILING_COMMA.subn(rb"\1", buf)
    warnings.append(f"trailing commas: removed {n:,}")
    return fixed


def cut_tail(buf: Buffer, limit: int, truncated: bool, warnings: list[str]) -> Buffer | None:
    """Cut `buf` back to the last complete event before `limit` and close the brackets; if no event
    is complete in a cut-off file, close the event array where it opens (the file then holds 0
    events and the loader says so)."""
    closer = b"]" if buf[:1] == b"[" else b"]}"
    candidates = [buf[: pos + 1] + closer for pos in _event_ends(buf, limit)]
    opening = _array_start(buf)
    if truncated and opening is not None and opening <= limit:
        candidates.append(buf[:opening] + closer)
    for candidate in candidates:
        n_events = _count_events(candidate)
        if n_events is None:
            continue
        if truncated:
            warnings.append(f"truncated tail: kept {n_events:,} events that could be read")
        else:
            warnings.append(
                f"unreadable JSON at byte {limit:,}: kept the {n_events:,} events before it, "
                "dropped the rest"
            )
        return candidate
    return None


def _array_start(buf: Buffer) -> int | None:
    """Offset just after the `[` that opens the event array."""
    if buf[:1] == b"[":
        return 1
    match = _EVENTS_KEY.search(buf)
    return match.end() if match else None


def _event_ends(buf: Buffer, limit: int) -> list[int]:
    """Candidate cut points, latest first: the last `}` before `limit`, then `}` followed by `,{`."""
    lo = max(0, limit - _TAIL_WINDOW)
    ends = [m.start() for m in _EVENT_END.finditer(buf, lo, limit)]
    if not ends and lo > 0:
        ends = [m.start() for m in _EVENT_END.finditer(buf, 0, limit)]
    last = buf.rfind(b"}", 0, limit)
    candidates = ([last] if last >= 0 else []) + ends[::-1]
    return list(dict.fromkeys(candidates))[:_TAIL_TRIES]


def _count_events(candidate: Buffer) -> int | None:
    """Number of events if `candidate` is valid JSON (each event kept as raw bytes), else None."""
    try:
        if candidate[:1] == b"[":
            return len(msgspec.json.decode(candidate, type=list[msgspec.Raw]))
        return len(msgspec.json.decode(candidate, type=_Counted).traceEvents)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
