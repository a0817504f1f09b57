"""The `servescope.diff/1` JSON document of a TraceDiff, and its CSV rows. Presentation only: values are copied
from servescope.analysis.diff and rounded; nothing is computed here.

Keys, exactly: schema, kinds [{kind, steps_before, steps_after,
  classes {class: {before_us, after_us, ratio, significant}},
  collectives {collective: {before_calls, after_calls, before_median_us, after_median_us, ratio, significant}},
  kernels [{name, class, before_us, after_us, ratio, significant, before_calls, after_calls,
            before_median_us, after_median_us}]}].
Times are per step (µs; mean over the kind's steps), calls are per step, `*_median_us` is the per-call latency;
a side with no step of the kind has null values, and a side with no call a null `*_median_us`;
`ratio` = after / before (null when before is 0): of the time per step for classes and kernels, of the per-call
latency for collectives. `significant` is true/false by the test in servescope.analysis.diff, null = cannot tell (fewer
than 2 steps on a side); the test: |Δ median per step| > 3·(MAD before + MAD after).
Added within diff/1: per kind `verdict` (improved | regressed | no change | cannot tell, of the step time),
`step_time` and `gpu_busy` {before_us, after_us, ratio, significant}; per collective `before_us`, `after_us` (summed
time per step), `step_ratio`, `step_significant`; top level `before`/`after` {path, gpus, engines, step_sources,
ranks}, `compared`, `shared_label_patterns`, `warnings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only: report/csv_tables imports diff_csv_rows without the trace pipeline
    from servescope.analysis.diff import Change, KernelDiff, KindDiff, Side, TraceDiff

SCHEMA = "servescope.diff/1"
CSV_COLUMNS = ("kind", "steps_before", "steps_after", "section", "name", "class", "before_us", "after_us",
               "before_calls", "after_calls", "before_median_us", "after_median_us", "ratio", "significant")


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _v(x: float, present: bool, nd: int = 3) -> float | None:
    """A side's value, or None where that side has nothing to measure (no step of the kind, no call)."""
    return _r(x, nd) if present else None


def _class(c: Change, b: bool, a: bool) -> dict[str, Any]:
    return {"before_us": _v(c.before, b), "after_us": _v(c.after, a), "ratio": _r(c.ratio, 4),
            "significant": c.significant}


def _kernel(k: KernelDiff, b: bool, a: bool) -> dict[str, Any]:
    calls = k.calls_per_step
    return {"name": k.name, "class": k.kernel_class, **_class(k.time_us, b, a),
            "before_calls": _v(calls.before, b), "after_calls": _v(calls.after, a),
            "before_median_us": _v(k.median_us.before, b and calls.before > 0),
            "after_median_us": _v(k.median_us.after, a and calls.after > 0)}


def _kind(k: KindDiff) -> dict[str, Any]:
    b, a = k.steps_before > 0, k.steps_after > 0
    return {
        "kind": k.kind, "steps_before": k.steps_before, "steps_after": k.steps_after,
        "classes": {name: _class(c, b, a) for name, c in k.classes.items()},
        "collectives": {
            name: {"before_calls": _v(c.calls_per_step.before, b), "after_calls": _v(c.calls_per_step.after, a),
                   "before_median_us": _v(c.median_us.before, b and c.calls_per_step.before > 0),
                   "after_median_us": _v(c.median_us.after, a and c.calls_per_step.after > 0),
                   "ratio": _r(c.median_us.ratio, 4), "significant": c.median_us.significant,
                   **_step_time(c.time_us, b, a)}
            for name, c in k.collectives.items()
        },
        "kernels": [_kernel(x, b, a) for x in k.kernels],
        "verdict": k.verdict,
        "step_time": _class(k.span_us, b, a),
        "gpu_busy": _class(k.busy_us, b, a),
    }


def _step_time(c: Change | None, b: bool, a: bool) -> dict[str, Any]:
    """A collective's summed time per step (calls per step × mean call) beside its per-call latency."""
    if c is None:
        return {}
    return {"before_us": _v(c.before, b), "after_us": _v(c.after, a), "step_ratio": _r(c.ratio, 4),
            "step_significant": c.significant}


def _side(s: Side | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"path": s.path, "gpus": list(s.gpus), "engines": list(s.engines), "step_sources": dict(s.step_sources),
            "ranks": s.ranks}


def diff_document(d: TraceDiff) -> dict[str, Any]:
    return {"schema": SCHEMA, "kinds": [_kind(k) for k in d.kinds], "before": _side(d.before),
            "after": _side(d.after), "compared": d.compared, "shared_label_patterns": d.shared_label_patterns,
            "warnings": list(d.warnings)}


def diff_csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """CSV of a servescope.diff/1 document: one row per kind × class, kind × collective and kind × kernel,
    columns CSV_COLUMNS (empty = not applicable to the section)."""
    rows: list[dict[str, Any]] = []
    for kind in doc["kinds"]:
        head = {"kind": kind["kind"], "steps_before": kind["steps_before"], "steps_after": kind["steps_after"]}
        for name, c in kind["classes"].items():
            rows.append({**head, "section": "class", "name": name, "class": name, **c})
        for name, c in kind["collectives"].items():
            rows.append({**head, "section": "collective", "name": name, "class": "communication", **c})
        for k in kind["kernels"]:
            rows.append({**head, "section": "kernel", **k})
    return [{col: row.get(col) for col in CSV_COLUMNS} for row in rows]
