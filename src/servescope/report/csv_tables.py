"""CSV of a document: one flat table per schema, for spreadsheets. Presentation only.

Each schema names the list that is its main table (trace: one row per rank × step × class or collective; model:
one row per concurrency; validate: one row per modelled row; plan: one row per track); nested dicts become
dotted columns (`terms_ms.weights`), lists become `; `-joined cells. A document of an unknown schema falls back
to its first list of objects. Other modules add a schema by adding an entry to TABLES. Every cell and header is
made inert for spreadsheets (report.inert.csv_safe: text starting with = + - @ tab CR gets a leading ').
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from servescope.report.diff_doc import diff_csv_rows
from servescope.report.inert import csv_safe

Rows = list[dict[str, Any]]


def _flat(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, f"{key}."))
        elif isinstance(v, list):
            out[key] = "; ".join(str(x) for x in v)
        else:
            out[key] = v
    return out


def _trace_rows(doc: dict[str, Any]) -> Rows:
    rows: Rows = []
    for r in doc["ranks"]:
        for s in r["steps"]:
            head = {"rank": r["rank"], "step": s["index"], "kind": s["kind"], "label": s["label"],
                    "step_gpu_busy_us": s["gpu_busy_us"], "step_gpu_span_us": s["gpu_span_us"]}
            for cls, us in s["classes"].items():
                rows.append({**head, "section": "class", "name": cls, "time_us": us,
                             "sum_us": s["class_sum_us"].get(cls), "calls": s["class_calls"].get(cls),
                             "median_us": None, "p90_us": None})
            for name, c in s["collectives"].items():
                rows.append({**head, "section": "collective", "name": name, "time_us": c["total_us"],
                             "sum_us": c["total_us"], "calls": c["calls"], "median_us": c["median_us"],
                             "p90_us": c["p90_us"]})
    return rows


def _first_list(doc: dict[str, Any]) -> Rows:
    for v in doc.values():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return list(v)
    return [{k: v for k, v in doc.items() if not isinstance(v, list | dict)}]


def _spec_rows(doc: dict[str, Any]) -> Rows:
    sources = doc["sources"]
    return [{"field": k, "value": v if not isinstance(v, dict | list | tuple) else str(v),
             "source": sources.get(k) or sources.get(k.removesuffix("_bytes_per_s").removesuffix("_bytes"), "")}
            for k, v in doc["fields"].items()]


def _verify_rows(doc: dict[str, Any]) -> Rows:
    """verify/1's table (report.verify_doc, imported here because it loads the planner)."""
    from servescope.report.verify_doc import verify_csv_rows

    return verify_csv_rows(doc)


TABLES: dict[str, Callable[[dict[str, Any]], Rows]] = {
    "servescope.spec/1": _spec_rows,
    "servescope.specs/1": lambda d: [{"kind": "gpu", "name": n} for n in d["gpus"]]
    + [{"kind": "model", "name": n} for n in d["models"]],
    "servescope.trace/1": _trace_rows,
    "servescope.report/1": lambda d: _trace_rows(d["trace"]),
    "servescope.model/1": lambda d: list(d["points"]),
    "servescope.validate/1": lambda d: list(d["rows"])  # then the decode-only slice, marked (validate_doc.py)
    + [{**r, "slice": "decode_only"} for r in d.get("decode_only", {}).get("rows", [])],
    "servescope.plan/1": lambda d: list(d["tracks"]),
    "servescope.diff/1": diff_csv_rows,
    "servescope.verify/1": _verify_rows,
    "servescope.campaign/1": lambda d: list(d["entries"]),
}


def document_rows(doc: dict[str, Any]) -> Rows:
    """The flat rows of the document's main table."""
    return [_flat(r) for r in TABLES.get(str(doc.get("schema")), _first_list)(doc)]


def document_csv(doc: dict[str, Any]) -> str:
    """CSV text: header = the union of the rows' columns in first-seen order; empty cells for missing values."""
    rows = document_rows(doc)
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_safe(c) for c in columns])
    w.writerows([csv_safe(r.get(c)) if r.get(c) is not None else "" for c in columns] for r in rows)
    return buf.getvalue()
