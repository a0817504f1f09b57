"""The `servescope.simulate/1` JSON document of a simulated run (and of a comparison with measured benchmark
files). Presentation only: numbers are copied from the SimResult and converted to ms through servescope.units."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servescope.perfmodel.benchfile import BenchRun, MetricComparison
from servescope.perfmodel.simulate import SimResult, Stats
from servescope.units import MS_PER_S

SCHEMA = "servescope.simulate/1"


def _ms(st: Stats) -> dict[str, float]:
    return {"mean": st.mean_s * MS_PER_S, "p50": st.p50_s * MS_PER_S, "p90": st.p90_s * MS_PER_S,
            "p99": st.p99_s * MS_PER_S}


def run_dict(res: SimResult) -> dict[str, Any]:
    """One run's fields (the top level of the document)."""
    q = res.queueing
    return {
        "requests": res.requests,
        "duration_s": res.duration_s,
        "request_throughput_per_s": res.request_throughput_per_s,
        "output_tok_s": res.output_tok_s,
        "ttft_ms": _ms(res.ttft),
        "tpot_ms": _ms(res.tpot),
        "itl_ms": _ms(res.itl),
        "e2e_ms": _ms(res.e2e),
        "mean_in_flight": res.mean_in_flight,
        "max_step_ms": res.max_step_s * MS_PER_S,
        "kv_capacity_tokens": res.kv_capacity_tokens,
        "queueing": {"queued": q.queued, "mean_wait_s": q.mean_wait_s, "max_wait_s": q.max_wait_s,
                     "preemptions": q.preemptions, "preempted_requests": q.preempted_requests},
        "settings": res.settings,
        "timeline": res.timeline,
        "warnings": list(res.warnings),
    }


def simulate_document(res: SimResult) -> dict[str, Any]:
    """The `servescope.simulate/1` document of one run."""
    return {"schema": SCHEMA, **run_dict(res)}


def compare_document(pairs: Sequence[tuple[BenchRun, SimResult, Sequence[MetricComparison]]]) -> dict[str, Any]:
    """One simulate/1 document per measured run with its comparison rows (`simulate --compare FILE`)."""
    runs = []
    for run, res, rows in pairs:
        doc = simulate_document(res)
        doc["measured"] = {"file": run.path, "line": run.line, "tool": run.tool, "label": run.label()}
        doc["comparison"] = [{"metric": r.metric, "measured": r.measured, "simulated": r.simulated,
                              "error_pct": r.error_frac * 100.0} for r in rows]
        runs.append(doc)
    return {"schema": SCHEMA, "runs": runs}
