"""The `servescope.report/1` document behind `servescope report`: the trace document, one representative step's
kernels per kind (for the timeline), and with a scenario the plan document and its latency–throughput curves.
Presentation only: values are copied from the Overview and rounded; kernel names are shortened for display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servescope.advise import Overview
from servescope.analysis.timeline import StepTimeline
from servescope.planner.curves import Curve
from servescope.report.plan_doc import plan_document, scenario_document
from servescope.report.trace_json import trace_document
from servescope.report.trace_text import short_name
from servescope.units import s_to_ms

SCHEMA = "servescope.report/1"
__all__ = ["SCHEMA", "curves_document", "overview_document", "scenario_document"]


def _timeline(rank: int | None, t: StepTimeline) -> dict[str, Any]:
    return {
        "rank": rank, "kind": t.kind, "step": t.step, "label": t.label, "steps_of_kind": t.steps_of_kind,
        "left_out": t.left_out,
        "kernels": {"stream": list(t.stream), "start_us": [round(x, 3) for x in t.start_us],
                    "dur_us": [round(x, 3) for x in t.dur_us], "class": list(t.kernel_class),
                    "collective": list(t.collective), "name": [short_name(n) for n in t.name]},
    }


def _curve(c: Curve) -> dict[str, Any]:
    return {"name": c.name, "tracks": list(c.tracks),
            "points": [{"concurrency": p.concurrency, "batch": p.batch, "tpot_ms": s_to_ms(p.tpot_s),
                        "output_tok_s": p.output_tok_s, "tok_s_per_user": p.tok_s_per_user,
                        "tok_s_per_gpu": p.tok_s_per_gpu} for p in c.points]}


def curves_document(curves: Sequence[Curve]) -> list[dict[str, Any]]:
    """The `curves` entry of a report (and of a plan's HTML page)."""
    return [_curve(c) for c in curves]


def overview_document(o: Overview) -> dict[str, Any]:
    """The `servescope.report/1` document."""
    return {
        "schema": SCHEMA,
        "trace": trace_document(o.analysis),
        "timelines": [_timeline(b.rank, t) for b in o.analysis.ranks[:1] for t in b.timelines
                      if any(k.kind == t.kind for k in b.kinds)],
        "scenario": scenario_document(o.scenario),
        "plan": plan_document(o.plan) if o.plan is not None else None,
        "curves": curves_document(o.curves),
    }
