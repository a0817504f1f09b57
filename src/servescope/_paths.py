"""Input paths that are not files to read: devices (`/dev/zero`, `/dev/urandom` would be read for ever).

Every reader of a user-named file (traces, validation CSVs, length files, benchmark files, model configs) checks
this first and says so in one line. Pipes stay readable (`<(zcat trace.json.gz)`): they end.
Also the one reader of how much memory the machine has available (`available_memory_bytes`: what a reader may
hold whole, what a simulation may allocate; issue 21 budgets), or what the user set instead (`--max-memory`).
And the one guarded reader of structured inputs (`read_text`, `decode_json`, `each_json_line`, `finite_number`;
issue 32): result files, replays, engine logs, routing histograms, plans, campaign logs — bounded, typed errors.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servescope.errors import ServescopeError

MEMINFO = Path("/proc/meminfo")
MAX_MEMORY_ENV = "SERVESCOPE_MAX_MEMORY"  # bytes; set by `--max-memory` (inherited by worker processes)


def memory_override_bytes() -> int | None:
    """The memory budget the user set (`--max-memory`, or SERVESCOPE_MAX_MEMORY in bytes), None when unset."""
    text = os.environ.get(MAX_MEMORY_ENV, "").strip()
    return int(text) if text.isdigit() and len(text) <= 19 and int(text) > 0 else None  # 19 digits: no bignum


def available_memory_bytes() -> int | None:
    """The memory budget of this run: the user's (`memory_override_bytes`), else the kernel's MemAvailable (bytes
    a process can take without swapping), None where it is not known."""
    override = memory_override_bytes()
    if override is not None:
        return override
    try:
        with MEMINFO.open("rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_device(path: str | Path) -> bool:
    """A character or block device or a socket (links followed); False for files, folders, pipes and bad paths."""
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)

# --- the one guarded reader of structured inputs (issue 32) ----------------------------------------------------
# The one guarded reader of structured inputs (issue 32): benchmark result files, replays, request-length files,
# routing histograms, engine logs, plan documents, campaign logs and benchmark sidecars.
#
# Does: read a user-named file whole but bounded — a regular file or a pipe (never a device, a socket or a folder),
# at most `ceiling` bytes and at most a share of the run's memory budget (`--max-memory`, else MemAvailable:
# _paths.available_memory_bytes), refused with both sizes before anything is decoded; decode UTF-8 (a byte-order
# mark dropped) and JSON / JSON lines with every failure of the stdlib codec (JSONDecodeError, the ValueError of
# an integer over 4,300 digits, the RecursionError of deep nesting, invalid UTF-8) turned into the caller's typed
# error, one line: `FILE:LINE: what is wrong (what was expected)`. Integers of more than MAX_INT_DIGITS digits are
# decoded as floats (±inf when beyond a double), so no count reaches `int()`/`float()`/NumPy as a bignum;
# `finite_number` refuses NaN, ±inf and values beyond a field's bounds naming the file, the line and the field.
# Does not: interpret keys (each reader does: validation.benchfile, specs.routing_file, report.verify_doc, ...).
# Pipes stay readable (`<(zcat result.json.gz)`): they end, and are read at most one byte past the limit.

MAX_INT_DIGITS = 18  # a count or a time in tokens / ns fits in 18 digits; longer integers decode as floats
# Decoded JSON holds about this many bytes of Python objects per byte of text (dicts of floats and short strings):
# a file may take at most budget / BUDGET_SHARE bytes.
BUDGET_SHARE = 10
DEFAULT_CEILING = 256 << 20  # no structured input the project reads is near this (a 1 M-request replay: ~60 MB)


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def read_limit(ceiling: int = DEFAULT_CEILING) -> int:
    """The most bytes an input may hold: `ceiling`, less when the memory budget (`--max-memory`) allows less."""
    budget = available_memory_bytes()
    return ceiling if budget is None else max(1, min(ceiling, budget // BUDGET_SHARE))


def read_bytes(path: str | Path, what: str, error: type[ServescopeError], ceiling: int = DEFAULT_CEILING) -> bytes:
    """The bytes of a regular file or pipe named `path` (`what` it should be, for messages), at most
    read_limit(ceiling); `error` naming the file otherwise (a device, a folder, missing, unreadable, too large)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise error(f"{p}: no such file (expected {_a(what)})") from None
    except (OSError, ValueError) as e:
        raise error(f"{p}: cannot read the {what} ({getattr(e, 'strerror', None) or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p}: a folder, not {_a(what)}")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise error(f"{p}: a device, not {_a(what)}")
    limit = read_limit(ceiling)
    if stat.S_ISREG(st.st_mode) and st.st_size > limit:
        raise error(f"{p}: {_size(st.st_size)} is more than {_a(what)} may hold here ({_size(limit)}: "
                    f"{_why(limit, ceiling)})")
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror or e})") from None
    if len(data) > limit:
        raise error(f"{p}: more than {_size(limit)}, more than {_a(what)} may hold here ({_why(limit, ceiling)})")
    return data


def _a(what: str) -> str:
    return ("an " if what[:1] in ("a", "e", "i", "o", "u") else "a ") + what


def _why(limit: int, ceiling: int) -> str:
    return ("the ceiling for this kind of file" if limit >= ceiling
            else f"1/{BUDGET_SHARE} of the memory budget; --max-memory sets it")


def read_text(path: str | Path, what: str, error: type[ServescopeError], ceiling: int = DEFAULT_CEILING,
              errors: str = "strict") -> str:
    """read_bytes decoded as UTF-8 (a leading byte-order mark dropped); invalid UTF-8 is `error` naming the line,
    unless errors="replace" (logs: a stray byte is not a reason to refuse)."""
    data = read_bytes(path, what, error, ceiling)
    try:
        return data.decode("utf-8-sig", errors=errors)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}; expected {_a(what)})") from None


def _parse_int(text: str) -> int | float:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else float(text)


def decode_json(text: str, path: str | Path, error: type[ServescopeError], line: int | None = None) -> Any:
    """One JSON value; `error` ("FILE:LINE: not JSON (why)") on any failure of the codec. `line`: the text is that
    line of the file (JSON lines). NaN/Infinity tokens decode (SGLang writes Infinity): check with finite_number."""
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as e:
        at = line if line is not None else e.lineno
        raise error(f"{path}:{at}: not JSON ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise error(f"{path}:{line or 1}: not JSON this reader takes (nested too deeply: over ~1,000 levels)") from None
    except ValueError as e:  # numbers the codec refuses (int conversion limits)
        raise error(f"{path}:{line or 1}: not JSON this reader takes ({str(e).split(';')[0]})") from None


def each_json_line(text: str, path: str | Path, error: type[ServescopeError]) -> Iterator[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSON-lines text, linear in the text."""
    for no, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield no, decode_json(line, path, error, no)


def where(path: str | Path, line: int | None) -> str:
    return f"{path}:{line}" if line is not None else str(path)


def finite_number(value: object, path: str | Path, field: str, error: type[ServescopeError], *,
                  line: int | None = None, low: float | None = None, high: float | None = None,
                  integer: bool = False) -> float:
    """`value` as a float when it is a JSON number (not a bool), finite, within [low, high] and (integer) whole;
    `error` "FILE:LINE: field X: got V (expected ...)" otherwise."""
    expected = ("a whole number" if integer else "a finite number") + _bounds(low, high)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{where(path, line)}: field {field}: got {_shown(value)} (expected {expected})")
    v = float(value) if not isinstance(value, int) or abs(value) < 2**63 else math.inf
    if (not math.isfinite(v) or (low is not None and v < low) or (high is not None and v > high)
            or (integer and v != math.floor(v))):
        raise error(f"{where(path, line)}: field {field}: got {_shown(value)} (expected {expected})")
    return v


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" in [{low:g}, {high:g}]"
    if low is not None:
        return f" ≥ {low:g}"
    return f" ≤ {high:g}" if high is not None else ""


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "an integer of 60+ digits"
    return text if len(text) <= 40 else text[:37] + "..."
