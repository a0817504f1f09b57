"""`servescope verify`'s documents and files: the `servescope.verify/1` document of a Verification, the campaign
log (one verify/1 document per JSON line, appended) and the `servescope.campaign/1` document that sums it up.

verify/1 keys: schema, plan (the plan file), objective (tpot | throughput), concurrency, range_basis (the plan's),
baseline {value, unit, basis} (the plan's baseline of the objective; basis measured | calibrated | extrapolated |
modelled, planner.basis), before / after {value, unit, source,
kind (trace | benchmark | figure), detail, concurrency}, measured_gain, applied [kind], applied_from (named |
found | plan_combined), found [{kind, evidence}] (applied_from found: what changed between the two traces named
each scored track), tracks [{kind, gain, gain_low, gain_high, measured_gain, verdict}] (measured_gain and verdict
only when one track was applied: several share one measurement, scored in `check`), check {tracks, basis (track |
plan_combined | product), basis_text, gain, gain_low, gain_high, measured_gain, verdict (inside | above |
below), miss}, warnings, plan_applied (the tracks already applied when the plan was made). Values: TPOT in ms, throughput in output tok/s. A logged line adds `logged_at` (UTC,
ISO 8601). See docs/json.md and docs/plan.md ("Scoring a plan").
Does: read the plan file (`read_plan`: the JSON, its schema, then planner.verify.plan_prediction for the
keys; one line naming the file and what is missing), build the documents, append to and read the log.
Does not: measure or score (servescope.advise, servescope.planner.verify).
"""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servescope._paths import decode_json, is_device, read_text
from servescope.errors import OutputError, PlanError
from servescope.planner.verify import (
    BASIS_TEXT,
    Measured,
    PlanPrediction,
    Verification,
    plan_prediction,
)
from servescope.report.plan_doc import SCHEMA as PLAN_SCHEMA
from servescope.units import MS_PER_S

SCHEMA = "servescope.verify/1"
CAMPAIGN_SCHEMA = "servescope.campaign/1"
UNITS = {"tpot": "ms", "throughput": "tok/s"}
_ENTRY_KEYS = {"objective": None, "concurrency": None, "plan": None, "before": ("value", "unit"),
               "after": ("value", "unit"),
               "check": ("tracks", "basis", "gain", "gain_low", "gain_high", "measured_gain", "verdict")}


def read_plan(path: str | Path) -> PlanPrediction:
    """What the plan file (`servescope plan --json -o plan.json`) predicted; PlanError naming the file and the
    missing key or the reason otherwise."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise PlanError(f"{p}: no such plan file (write one with `servescope plan … --json -o {p.name}`)")
    doc = decode_json(read_text(p, "plan file", PlanError, ceiling=64 << 20), p, PlanError)
    if not isinstance(doc, dict) or "schema" not in doc:
        raise PlanError(f"{p}: not a plan document: missing key schema (write one with `servescope plan … --json "
                        f"-o {p.name}`)")
    if doc["schema"] != PLAN_SCHEMA:
        raise PlanError(f"{p}: schema {doc['schema']!r}, expected {PLAN_SCHEMA!r} (`servescope plan … --json`)")
    return plan_prediction(doc, str(p))


def _value(objective: str, si: float) -> float:
    return si * MS_PER_S if objective == "tpot" else si


def _measured(objective: str, m: Measured) -> dict[str, Any]:
    return {"value": _value(objective, m.value), "unit": UNITS[objective], "source": m.source, "kind": m.kind,
            "detail": m.detail, "concurrency": m.concurrency}


def verify_document(v: Verification) -> dict[str, Any]:
    """The versioned JSON-ready dict of a verification (module docstring)."""
    p, c = v.plan, v.check
    alone = len(v.tracks) == 1
    baseline = p.baseline_tpot_s if v.objective == "tpot" else p.baseline_output_tok_s
    return {
        "schema": SCHEMA,
        "plan": p.source,
        "objective": v.objective,
        "concurrency": p.concurrency,
        "range_basis": p.range_basis,
        "baseline": {"value": _value(v.objective, baseline), "unit": UNITS[v.objective], "basis": p.baseline_basis},
        "before": _measured(v.objective, v.before),
        "after": _measured(v.objective, v.after),
        "measured_gain": c.measured_gain,
        "applied": list(v.applied),
        "applied_from": v.applied_from,
        "found": [{"kind": f.kind, "evidence": f.evidence} for f in v.found],
        "tracks": [{"kind": t.kind, "gain": t.gain, "gain_low": t.gain_low, "gain_high": t.gain_high,
                    "measured_gain": c.measured_gain if alone else None, "verdict": c.verdict if alone else None}
                   for t in v.tracks],
        "check": {"tracks": list(c.tracks), "basis": c.basis, "basis_text": BASIS_TEXT[c.basis], "gain": c.gain,
                  "gain_low": c.gain_low, "gain_high": c.gain_high, "measured_gain": c.measured_gain,
                  "verdict": c.verdict, "miss": c.miss},
        "warnings": list(v.warnings),
        "plan_applied": list(p.applied),
    }


def verify_csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """CSV of verify/1: one row per applied track, then (several tracks) the row of their combined check."""
    head = {"plan": doc["plan"], "objective": doc["objective"], "unit": doc["before"]["unit"],
            "before": doc["before"]["value"], "after": doc["after"]["value"]}
    rows = [{**head, **t, "basis": "track" if t["verdict"] else None} for t in doc["tracks"]]
    c = doc["check"]
    if len(doc["tracks"]) > 1:
        rows.append({**head, "kind": "+".join(c["tracks"]), "gain": c["gain"], "gain_low": c["gain_low"],
                     "gain_high": c["gain_high"], "measured_gain": c["measured_gain"], "verdict": c["verdict"],
                     "basis": c["basis"]})
    return rows


# --- the campaign log ------------------------------------------------------------------------------------------

def append_log(path: str | Path, document: dict[str, Any], inputs: tuple[str | Path, ...] = (),
               now: datetime | None = None) -> None:
    """Append the document as one JSON line (with `logged_at`) to the log, creating it: one write of the whole line
    to a file opened for appending (O_APPEND) under an exclusive lock (_lock), so concurrent appends never
    interleave and nothing written before is rewritten. OutputError naming the file when it cannot be written or is one of `inputs` (the plan file,
    the measurements: a log is never appended to an input)."""
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    p = Path(path)
    check_log_target(p, inputs)
    try:
        line = (json.dumps({**document, "logged_at": stamp}, ensure_ascii=False, allow_nan=False) + "\n").encode()
        if p.is_dir() or is_device(p):
            raise OutputError(f"{p}: not a log file (a folder or a device)")
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            _lock(fd)  # the tail check and the write as one step: another writer's line can be half in the file
            line = _after_damaged_tail(fd) + line
            written = os.write(fd, line)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        raise OutputError(f"{p}: cannot append to the log ({e.__class__.__name__}: "
                          f"{getattr(e, 'strerror', None) or e})") from None
    if written != len(line):
        raise OutputError(f"{p}: the log line was written only in part ({written} of {len(line)} bytes)")


def check_log_target(path: str | Path, inputs: tuple[str | Path, ...] = ()) -> None:
    """OutputError naming the file unless `path` may take a campaign-log line: not one of `inputs` (same file,
    through links) nor inside an input folder (`--before RANKS/`), and, when it exists and holds anything, a
    campaign log (its first line a verify/1 document: a log is only ever a campaign log)."""
    p = Path(path)
    for given in inputs:
        g = Path(given)
        if _same_file(p, g) or (_is_dir(g) and _inside(p, g)):
            raise OutputError(f"{p}: the log is an input of this verification ({given}); give another --log file")
    try:
        if not p.is_file() or p.stat().st_size == 0:
            return
        with p.open("rb") as fh:
            first = fh.readline(1 << 20)
    except OSError:
        return  # os.open in append_log says why
    if first.startswith(f'{{"schema": "{SCHEMA}"'.encode()):
        return  # what append_log writes first, whole or cut short by a crash (the next entry starts a new line)
    try:
        doc = json.loads(first) if first.strip() else None
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise OutputError(f"{p}: not a campaign log (its first line is not a {SCHEMA} document); --log appends "
                          "only to a log `servescope verify --log` started")


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


def _inside(p: Path, folder: Path) -> bool:
    real, real_folder = os.path.realpath(p), os.path.realpath(folder)
    return os.path.commonpath([real, real_folder]) == real_folder


def _lock(fd: int) -> None:
    """An exclusive advisory lock on the open log, released when it is closed: concurrent appenders (each through
    append_log) take turns at the tail check and the write. Without it a writer could read the last byte of a line
    another writer is still writing (the size grows during a write of several pages) and start a needless new line.
    No-op where flock does not exist (not POSIX)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _after_damaged_tail(fd: int) -> bytes:
    """b"\\n" when the log's last byte is not a newline (a line cut short by a crash or an editor): the next
    entry starts a line of its own instead of being glued onto the damaged one; else b""."""
    size = os.fstat(fd).st_size
    return b"\n" if size > 0 and os.pread(fd, 1, size - 1) != b"\n" else b""


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


class LogEntries(list[dict[str, Any]]):
    """The whole entries of a campaign log, in order, and what was wrong with each damaged line (`damaged`:
    "FILE:LINE: why"), which campaign_document turns into warnings."""

    damaged: tuple[str, ...] = ()


def read_log(path: str | Path) -> LogEntries:
    """The verify/1 documents of a campaign log, in order. A damaged line (cut short by a crash, not JSON, not a
    verify/1 entry) is skipped and said by number (`LogEntries.damaged`), the rest read; PlanError naming the file
    (and the first damaged line) when no whole entry is left."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise PlanError(f"{p}: no such campaign log (verify with --log {p.name} to start one)")
    entries, damaged = LogEntries(), []
    for no, line in enumerate(read_text(p, "campaign log", PlanError).splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = decode_json(line, p, PlanError, no)
        except PlanError as e:
            damaged.append(str(e))
            continue
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            damaged.append(f"{p}:{no}: not a {SCHEMA} line (a log holds what `servescope verify --log` appends)")
        elif bad := _bad_entry(doc):
            damaged.append(f"{p}:{no}: {bad}")
        else:
            entries.append(doc)
    if not entries:
        raise PlanError(damaged[0] if damaged else f"{p}: the campaign log is empty")
    entries.damaged = tuple(damaged)
    return entries


_NUMBERS = ("before.value", "after.value", "check.gain", "check.gain_low", "check.gain_high", "check.measured_gain")


def _bad_entry(doc: dict[str, Any]) -> str | None:
    """What is wrong with a log entry: the first key it lacks (dotted for a nested one) or a bad value; None."""
    for key, inner in _ENTRY_KEYS.items():
        if key not in doc or inner is not None and not isinstance(doc[key], dict):
            return f"missing key {key}"
        for k in inner or ():
            if k not in doc[key]:
                return f"missing key {key}.{k}"
    for dotted in _NUMBERS:
        outer, inner_key = dotted.split(".")
        v = doc[outer][inner_key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            return f"{dotted} must be a positive number, got {v!r}"
    if doc["check"]["verdict"] not in ("inside", "above", "below"):
        return f"check.verdict must be inside, above or below, got {str(doc['check']['verdict'])[:40]!r}"
    if not isinstance(doc["check"]["tracks"], list) or not all(isinstance(t, str) for t in doc["check"]["tracks"]):
        return "check.tracks must be a list of track names"
    objective = doc["objective"]
    if (not isinstance(objective, str) or objective not in UNITS
            or not doc["before"]["unit"] == doc["after"]["unit"] == UNITS[objective]):
        return f"objective must be tpot (ms) or throughput (tok/s), got {str(objective)[:40]!r}"
    if not isinstance(doc["check"]["basis"], str) or doc["check"]["basis"] not in BASIS_TEXT:
        return "check.basis must be track, plan_combined or product"
    if not isinstance(doc["plan"], str):
        return "plan must be the plan file's name"
    conc = doc["concurrency"]
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int | float) or not math.isfinite(conc)):
        return f"concurrency must be a number, got {str(conc)[:40]!r}"
    return None


CHAIN_TOLERANCE = 0.10  # a change's `before` within 10 % of the previous `after`: the measurements chain


def campaign_document(path: str | Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The `servescope.campaign/1` document of a log's entries: each change in order with its prediction, the
    measurement and the running objective (`after`); `since_start` is the product of the measured gains so far
    (each change measured on its own before/after, so a chain holds across measurement sources); counts of
    verdicts and the hit rate of the ranges (inside / scored). Entries of another objective than the first are
    listed but not chained."""
    first = entries[0]
    objective = first["objective"]
    rows: list[dict[str, Any]] = []
    chain, warnings = 1.0, [f"{d}; the line is skipped" for d in getattr(entries, "damaged", ())]
    prev_after: float | None = None
    for n, e in enumerate(entries, 1):
        c = e["check"]
        same = e["objective"] == objective
        if same:
            chain *= float(c["measured_gain"])
            before = float(e["before"]["value"])
            if prev_after is not None and abs(before / prev_after - 1.0) > CHAIN_TOLERANCE:
                warnings.append(f"entry {n}: before {before:.4g} {e['before']['unit']} is not the previous after "
                                f"{prev_after:.4g} (more than {CHAIN_TOLERANCE:.0%} apart): the measurements do not "
                                "chain; since_start multiplies the measured gains")
            prev_after = float(e["after"]["value"])
        rows.append({"n": n, "logged_at": e.get("logged_at"), "plan": e["plan"], "objective": e["objective"],
                     "concurrency": e["concurrency"], "tracks": list(c["tracks"]), "basis": c["basis"],
                     "gain": c["gain"], "gain_low": c["gain_low"], "gain_high": c["gain_high"],
                     "measured_gain": c["measured_gain"], "verdict": c["verdict"], "unit": e["after"]["unit"],
                     "before": e["before"]["value"], "after": e["after"]["value"],
                     "since_start": chain if same else None})
    counts = {k: sum(r["verdict"] == k for r in rows) for k in ("inside", "above", "below")}
    scored = sum(counts.values())
    mine = [r for r in rows if r["objective"] == objective]
    if len(mine) < len(rows):
        warnings.append(f"{len(rows) - len(mine)} entries verify another objective than the first ({objective}): "
                        "listed and scored, not chained")
    return {"schema": CAMPAIGN_SCHEMA, "log": str(path), "entries": rows, "scored": scored, **counts,
            "hit_rate": counts["inside"] / scored if scored else None, "objective": objective,
            "start": {"value": first["before"]["value"], "unit": first["before"]["unit"]},
            "now": {"value": mine[-1]["after"], "unit": mine[-1]["unit"]},
            "total_gain": mine[-1]["since_start"], "warnings": warnings}


def campaign_csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["entries"])
