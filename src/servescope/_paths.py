"""Input paths that are not files to read: devices (`/dev/zero`, `/dev/urandom` would be read for ever).

Every reader of a user-named file (traces, validation CSVs, length files, benchmark files, model configs) checks
this first and says so in one line. Pipes stay readable (`<(zcat trace.json.gz)`): they end.
Also the one reader of how much memory the machine has available (`available_memory_bytes`: what a reader may
hold whole, what a simulation may allocate; issue 21 budgets), or what the user set instead (`--max-memory`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
