"""Build a big (~70 MB) plain-JSON Kineto trace for load benchmarks, and optionally time `load_trace` on it.

What it does: repeats the events of the TraceLens B200 eager trace (vLLM, gpt-oss, 8×B200) until the
output reaches the requested size. Copy k shifts every timestamp by k × (trace span + 1 ms) and gives
correlation ids, `External id`s, flow ids and Python ids fresh values (offset by k × (max id + 1)), so
linking stays one-to-one as in a real longer capture. `deviceProperties` and `distributedInfo` are kept.
What it does not do: invent new kernels or shapes — the event mix is the B200 trace's, python_function
events included (as in a real with_stack=True capture).

    python bench/make_big_trace.py [OUT] [--size-mb 70] [--source PATH] [--time]

`--time` then loads the file with `servescope.trace.load_trace` in fresh subprocesses (`--repeat`,
default 3) and prints import and load wall times and peak RSS of the fastest run as one JSON line.
Peak RSS is the child's VmHWM (/proc/self/status): on Linux `resource.getrusage(...).ru_maxrss` of a
child started with fork+exec includes the parent's peak from before the exec — here the ~300 MB this
script used to build the trace — so it is only the fallback.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path("/work/shared/traces/tracelens/b200/eager_trace.json.gz")
DEFAULT_OUT = Path(__file__).parent / "out" / "big_trace.json"
ID_ARGS = ("External id", "correlation", "Python id", "Python parent id")


def _max_ids(events: list[dict[str, Any]]) -> dict[str, int]:
    """Largest value of each id field (args ids and the flow `id`), so copies never collide."""
    top = {key: 0 for key in (*ID_ARGS, "id")}
    for ev in events:
        if isinstance(ev.get("id"), int):
            top["id"] = max(top["id"], ev["id"])
        args = ev.get("args") or {}
        for key in ID_ARGS:
            if isinstance(args.get(key), int):
                top[key] = max(top[key], args[key])
    return top


def _shifted(
    ev: dict[str, Any], copy: int, dt_us: float, id_step: dict[str, int]
) -> dict[str, Any]:
    out = dict(ev)
    if isinstance(ev.get("ts"), (int, float)):
        out["ts"] = round(ev["ts"] + copy * dt_us, 3)
    if isinstance(ev.get("id"), int):
        out["id"] = ev["id"] + copy * id_step["id"]
    if isinstance(ev.get("args"), dict):
        args = dict(ev["args"])
        for key in ID_ARGS:
            if isinstance(args.get(key), int):
                args[key] += copy * id_step[key]
        out["args"] = args
    return out


def build(source: Path, out: Path, size_mb: float) -> int:
    """Write the big trace; return the number of events written."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + float(e.get("dur", 0)) for e in timed)
    dt_us = (t1 - t0) + 1000.0
    id_step = {k: v + 1 for k, v in _max_ids(events).items()}
    one_copy_bytes = len(json.dumps(events))
    copies = max(1, round(size_mb * 1e6 / one_copy_bytes))
    doc["traceEvents"] = [_shifted(e, k, dt_us, id_step) for k in range(copies) for e in events]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc))
    return len(doc["traceEvents"])


TIMER = """
import json, resource, sys, time
t0 = time.perf_counter()
from servescope.trace import load_trace
t1 = time.perf_counter()
tr = load_trace(sys.argv[1])
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
try:  # ru_maxrss survives fork+exec (it would count this script's own peak): prefer VmHWM
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    rss = int(hwm.split()[1]) / 1024
except (OSError, IndexError):
    pass
print(json.dumps({"import_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3),
                  "total_s": round(t2 - t0, 3), "peak_rss_mb": round(rss, 1), "rows": tr.events.height}))
"""


def time_load(path: Path, repeat: int = 3) -> dict[str, Any]:
    """Load `path` in `repeat` fresh interpreters; the run with the smallest total time, plus every
    run's total. Times: imports, load_trace, both (s); peak RSS (MB, ru_maxrss)."""
    runs = []
    for _ in range(repeat):
        cmd = [sys.executable, "-c", TIMER, str(path)]
        runs.append(
            json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        )
    best = min(runs, key=lambda r: r["total_s"])
    return {**best, "total_s_runs": [r["total_s"] for r in runs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--size-mb", type=float, default=70.0)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--time", action="store_true", help="then time load_trace on it")
    ap.add_argument("--time-only", action="store_true", help="time an existing file, do not build")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes to time (best is kept)")
    a = ap.parse_args()
    if a.time_only:
        print(json.dumps({"path": str(a.out), **time_load(a.out, a.repeat)}))
        return
    n = build(a.source, a.out, a.size_mb)
    size_mb = a.out.stat().st_size / 1e6
    print(json.dumps({"path": str(a.out), "size_mb": round(size_mb, 1), "events": n}))
    if a.time:
        print(json.dumps({"path": str(a.out), **time_load(a.out, a.repeat)}))


if __name__ == "__main__":
    main()
