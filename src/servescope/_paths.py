"""Input paths that are not files to read: devices (`/dev/zero`, `/dev/urandom` would be read for ever).

Every reader of a user-named file (traces, validation CSVs, length files, benchmark files, model configs) checks
this first and says so in one line. Pipes stay readable (`<(zcat trace.json.gz)`): they end.
Also the one reader of how much memory the machine has available (`available_memory_bytes`: what a reader may
hold whole, what a simulation may allocate; issue 21 budgets).
"""

from __future__ import annotations

import stat
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available_memory_bytes() -> int | None:
    """The kernel's MemAvailable (bytes a process can take without swapping), None where it is not known."""
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
