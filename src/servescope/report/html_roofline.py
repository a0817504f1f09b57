"""The roofline section of the HTML trace and report pages (issue 19 part 6). Presentation only: every number is read
from the trace document (kernel rows' `flops`, `flop_per_byte`, `achieved_tflops`; the rank's datasheet `peaks`)."""

from __future__ import annotations

from typing import Any

from servescope.report import html_charts as charts
from servescope.report.html_sections import Section, chart, table
from servescope.report.trace_text import short_names


def roofline_section(trace: dict[str, Any]) -> Section:
    """One roofline chart and table per (rank, step kind) whose top kernels carry FLOPs."""
    blocks: list[dict[str, Any]] = []
    many = len(trace["ranks"]) > 1
    for r in trace["ranks"]:
        for k in r["by_kind"]:
            label = f"rank {r['rank']} {k['kind']}" if many else k["kind"]
            rows = [t for t in k["top_kernels"] if t.get("flops")]
            if not rows:
                continue
            blocks.append(chart(charts.roofline(label, rows, r.get("peaks"))))
            names = short_names((t["name"] for t in rows), 80)
            blocks.append(table(
                ["kernel", "class", "FLOP/byte", "TFLOP/s", "TB/s", "bound", "% of peak", "% of achievable"],
                [[names[t["name"]], t["class"], t["flop_per_byte"], t["achieved_tflops"], t["achieved_tbps"],
                  t["bound"] or "–", t["pct_of_peak"], t["pct_of_achievable"]] for t in rows],
                title=f"{label}: kernels with shapes", note="; ".join(r.get("roofline_notes") or [])))
    if not blocks:
        blocks.append({"type": "text", "text": "no top kernel carries FLOPs (no Input Dims: record_shapes off, or "
                                               "graph replays without a capture trace; docs/capture.md)"})
    return {"id": "roofline", "title": "Kernels on the roofline", "blocks": blocks,
            "intro": "Each kernel with a shape (work from its launching op's Input Dims) at its arithmetic "
                     "intensity and achieved rate; the lines are the GPU's datasheet rooflines. Bytes-only kernels "
                     "(0 FLOPs) cannot sit on a log axis and are in the table of the trace command only."}
