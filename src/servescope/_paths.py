"""Input paths that are not files to read: devices (`/dev/zero`, `/dev/urandom` would be read for ever).

Every reader of a user-named file (traces, validation CSVs, length files, benchmark files, model configs) checks
this first and says so in one line. Pipes stay readable (`<(zcat trace.json.gz)`): they end.
"""

from __future__ import annotations

import stat
from pathlib import Path


def is_device(path: str | Path) -> bool:
    """A character or block device or a socket (links followed); False for files, folders, pipes and bad paths."""
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)
