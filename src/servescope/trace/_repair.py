"""Byte-level repairs for damaged Kineto JSON, each reporting what it changed as a warning.

What it does: given the bytes and msgspec's DecodeError message, picks one repair and returns new bytes:
invalid UTF-8 → U+FFFD; lone UTF-16 surrogate escapes → \\ufffd; raw control characters → spaces;
bare `N/A`, `NaN`, `Infinity`, `undefined` values → null; trailing commas removed; a truncated or
unreadable tail → cut back to the last complete event and the brackets closed. Each repair runs at most
once per file (the tail cut may repeat), so a file either converges or is reported as not a trace.
What it does not do: repairs on the fast path — clean files never reach this module. Integers beyond
int64 (e.g. `Comms Id`) need no repair: msgspec reads them as Python ints and `_frame.py` nulls them.
"""

from __future__ import annotations

import re

import msgspec

BOM = b"\xef\xbb\xbf"
_OFFSET = re.compile(r"\(byte (\d+)\)")
_CONTROL = bytes(range(32))
_CONTROL_NOT_WS = bytes(c for c in range(32) if c not in (9, 10, 13))
_TO_SPACE = bytes.maketrans(_CONTROL, b" " * 32)
_BARE = re.compile(rb"(?<=[:,\[])(\s*)(?:N/A|NaN|nan|-?Infinity|-?inf|None|undefined)(?=\s*[,\]}])")
_TRAILING_COMMA = re.compile(rb",(\s*[\]}])")
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = re.compile(
    rb"(?:" + _HIGH + rb"(?!" + _LOW + rb"))|(?:(?<!" + _HIGH + rb")" + _LOW + rb")"
)
_EVENT_END = re.compile(rb"\}(?=\s*,\s*\{)")
_TAIL_WINDOW = 1 << 20
_TAIL_TRIES = 8


class _Counted(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


def strip_bom_and_padding(buf: bytes) -> bytes:
    """Drop a UTF-8 BOM and surrounding whitespace / NUL padding (files cut while preallocated)."""
    if buf[:8].lstrip().startswith(BOM):
        buf = buf.lstrip()[len(BOM) :]
    return buf.strip(b" \t\r\n\x00")


def repair(buf: bytes, message: str, done: set[str], warnings: list[str]) -> bytes | None:
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
    if "trailing comma" in message and "comma" not in done:
        done.add("comma")
        return _fix_trailing_commas(buf, warnings)
    truncated = "truncated" in message
    return cut_tail(buf, len(buf) if truncated else offset, truncated, warnings)


def _fix_utf8(buf: bytes, warnings: list[str]) -> bytes:
    text = buf.decode("utf-8", errors="replace")
    n_bad = text.count("\ufffd") - buf.count("\ufffd".encode())
    warnings.append(f"invalid UTF-8: replaced {n_bad:,} bad byte sequences with U+FFFD")
    return text.encode("utf-8")


def _fix_surrogates(buf: bytes, warnings: list[str]) -> bytes:
    fixed, n = _LONE_SURROGATE.subn(rb"\\ufffd", buf)
    warnings.append(f"invalid \\u escapes: replaced {n:,} lone UTF-16 surrogates with U+FFFD")
    return fixed


def _fix_control(buf: bytes, warnings: list[str]) -> bytes:
    n = len(buf) - len(buf.translate(None, _CONTROL_NOT_WS))
    warnings.append(f"control characters: replaced {n:,} raw control characters with spaces")
    return buf.translate(_TO_SPACE)


def _fix_bare(buf: bytes, warnings: list[str]) -> bytes | None:
    fixed, n = _BARE.subn(rb"\1null", buf)
    if n == 0:
        return None
    warnings.append(f"bare non-JSON values: {n:,} unquoted N/A / NaN / Infinity read as null")
    return fixed


def _fix_trailing_commas(buf: bytes, warnings: list[str]) -> bytes:
    fixed, n = _TRAILING_COMMA.subn(rb"\1", buf)
    warnings.append(f"trailing commas: removed {n:,}")
    return fixed


def cut_tail(buf: bytes, limit: int, truncated: bool, warnings: list[str]) -> bytes | None:
    """Cut `buf` back to the last complete event before `limit` and close the brackets."""
    closer = b"]" if buf[:1] == b"[" else b"]}"
    for pos in _event_ends(buf, limit):
        candidate = buf[: pos + 1] + closer
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


def _event_ends(buf: bytes, limit: int) -> list[int]:
    """Candidate cut points, latest first: the last `}` before `limit`, then `}` followed by `,{`."""
    lo = max(0, limit - _TAIL_WINDOW)
    ends = [m.start() for m in _EVENT_END.finditer(buf, lo, limit)]
    if not ends and lo > 0:
        ends = [m.start() for m in _EVENT_END.finditer(buf, 0, limit)]
    last = buf.rfind(b"}", 0, limit)
    candidates = ([last] if last >= 0 else []) + ends[::-1]
    return list(dict.fromkeys(candidates))[:_TAIL_TRIES]


def _count_events(candidate: bytes) -> int | None:
    """Number of events if `candidate` is valid JSON (each event kept as raw bytes), else None."""
    try:
        if candidate[:1] == b"[":
            return len(msgspec.json.decode(candidate, type=list[msgspec.Raw]))
        return len(msgspec.json.decode(candidate, type=_Counted).traceEvents)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
