"""Everything the HTML report shows, in one call: the trace analysis (with a representative step's timeline per
kind) and, when a scenario is given, the model calibrated on the trace, the plan and its latency–throughput curves.

Does: glue `analysis`, `calibrate`, `planner.plan` and `planner.curves`, loading the trace once (the calibration
uses the analysed breakdown of the first rank that has steps, not a second read of the file).
Does not: compute anything of its own, print, or format (servescope.report.overview_doc and report.html do).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servescope.analysis import TraceAnalysis, analyze_trace
from servescope.calibrate import Calibration, calibrate
from servescope.planner import Plan, plan
from servescope.planner.curves import Curve, plan_curves


@dataclass(frozen=True)
class Overview:
    analysis: TraceAnalysis
    scenario: Any = None  # servescope.perfmodel.Scenario
    calibration: Calibration | None = None
    plan: Plan | None = None
    curves: tuple[Curve, ...] = ()


def overview(path: str | Path, scenario: Any = None, kind: str | None = None, top_n: int = 10,
             workers: int | None = None, **plan_options: Any) -> Overview:
    """Analyse the trace; with a scenario, calibrate it on the first rank with steps and plan (plan_options go
    to planner.plan: objective, concurrency, target, forbid, spec, tpot_limit_s)."""
    analysis = analyze_trace(path, kind=kind, top_n=top_n, workers=workers)
    if scenario is None:
        return Overview(analysis)
    rank = next((b for b in analysis.ranks if b.steps), analysis.ranks[0])
    cal = calibrate(rank, scenario)
    p = plan(scenario, calibration=cal, **plan_options)
    return Overview(analysis, scenario, cal, p, plan_curves(p))
