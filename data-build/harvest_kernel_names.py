"""Harvest unique GPU kernel names (with call counts and summed duration) from every trace under a folder.

Reads Kineto JSON (.json / .json.gz) with stdlib gzip+json and Nsight SQLite exports with sqlite3.
Used once to seed tests/data/kernel_names.csv (labels there are set by hand, not by this script).
Usage: python data-build/harvest_kernel_names.py /work/shared/traces > /tmp/kernel_names_raw.tsv
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
from collections import defaultdict
from pathlib import Path

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}


def _kineto(path: Path) -> dict[str, list[float]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        data = json.loads(fh.read(), strict=False)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for ev in events:
        if ev.get("ph") == "X" and ev.get("cat") in GPU_CATS:
            acc = out[ev.get("name", "")]
            acc[0] += 1
            acc[1] += float(ev.get("dur", 0) or 0)
    return out


def _nsys(path: Path) -> dict[str, list[float]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT s.value, COUNT(*), SUM(k.end - k.start) / 1000.0 FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value"
    ).fetchall()
    return {name: [n, dur_us] for name, n, dur_us in rows}


def main(root: str) -> None:
    for path in sorted(Path(root).rglob("*")):
        if path.name.endswith((".json", ".json.gz")):
            names = _kineto(path)
        elif path.suffix == ".sqlite":
            names = _nsys(path)
        else:
            continue
        rel = path.relative_to(root)
        for name, (count, dur_us) in sorted(names.items(), key=lambda kv: -kv[1][1]):
            sys.stdout.write(f"{rel}\t{int(count)}\t{dur_us:.1f}\t{name}\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/traces")
