"""The `servescope.simulate/1` JSON document of a simulated run (and of a comparison with measured benchmark
files). Presentation only: numbers are copied from the SimResult and converted to ms through servescope.units."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servescope.simulate import SimResult, Stats
from servescope.units import MS_PER_S

if TYPE_CHECKING:  # types only: `simulate` imports neither the planner (its package runs planner.plan) nor the readers
    from servescope.planner.sweep import Simulated, Sweep
    from servescope.validation.benchfile import BenchRun, MetricComparison
    from servescope.validation.benchio import Requests
    from servescope.validation.metrics import EngineMetrics

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
        **({"boundaries": boundaries_document(res)} if res.parts else {}),
        **({"prefix_cache": {"prefix_hit_rate": res.settings.get("prefix_hit_rate", 0.0),
                             "shared_prefix_tokens": res.settings.get("shared_prefix_tokens", 0), **res.prefix}}
           if res.prefix else {}),
    }


def boundaries_document(res: SimResult) -> dict[str, list[dict[str, Any]]]:
    """TTFT and TPOT by boundary (simulate/boundaries.py): per side, each part's ms (mean/p50/p90/p99 over the
    requests), the sign it enters the sum with, and where it came from (`source`: model | trace; `detail`)."""
    from servescope.simulate.boundaries import SIGNS, TPOT_PARTS, TTFT_PARTS

    out: dict[str, list[dict[str, Any]]] = {}
    for side, names in (("ttft", TTFT_PARTS), ("tpot", TPOT_PARTS)):
        rows = []
        for k in names:
            kind, _, detail = res.part_sources.get(k, "model").partition(": ")
            rows.append({"part": k, "sign": int(SIGNS.get(k, 1.0)), "ms": _ms(res.parts[k]), "source": kind,
                         "detail": detail})
        out[side] = rows
    return out


def simulate_document(res: SimResult) -> dict[str, Any]:
    """The `servescope.simulate/1` document of one run."""
    return {"schema": SCHEMA, **run_dict(res)}


def replay_document(res: SimResult, requests: Requests) -> dict[str, Any]:
    """`simulate --replay FILE`: the `servescope.simulate/1` document of the replayed run, plus `replay`: the file,
    its format, and the measured per-request latencies (ms: mean/p50/p90/p99; null for one the file lacks) beside
    the simulated ones, with the error of each mean (simulated − measured) / measured."""
    measured: dict[str, dict[str, float] | None] = {}
    errors: dict[str, float | None] = {}
    for metric in ("ttft", "tpot", "e2e"):
        values = requests.measured.get(f"{metric}_s")
        st = None if values is None else Stats.of(values)
        measured[f"{metric}_ms"] = None if st is None else _ms(st)
        sim = getattr(res, metric).mean_s
        ok = st is not None and st.mean_s == st.mean_s and st.mean_s > 0
        errors[f"{metric}_mean"] = (sim - st.mean_s) / st.mean_s if ok and st is not None else None
    return {"schema": SCHEMA, **run_dict(res),
            "replay": {"file": requests.path, "format": requests.source, "requests": int(len(requests.send_s)),
                       "measured": measured, "error": errors}}


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


BOUNDARY_ORDER = ("ttft", "queue", "prefill", "decode", "itl", "e2e")


def engine_metrics_document(m: EngineMetrics, sims: Sequence[SimResult]) -> dict[str, Any]:
    """`--metrics FILE`: the scrape's measured boundaries (ms: mean/p50/p90/p99, the series each came from, its
    sample count) beside the simulated ones — the runs' per-request samples pooled — with the error of each mean
    ((simulated − measured) / measured), and the scrape's gauges beside the simulation's."""
    import numpy as np

    rows = []
    for name in BOUNDARY_ORDER:
        b = m.boundaries.get(name)
        pooled = [r.samples[name] for r in sims if name in r.samples]
        sim = Stats.of(np.concatenate(pooled)) if pooled else None
        meas = None if b is None else Stats(b.mean_s, b.p50_s, b.p90_s, b.p99_s)
        ok = meas is not None and sim is not None and meas.mean_s > 0 and sim.mean_s == sim.mean_s
        rows.append({"boundary": name, "series": None if b is None else b.series,
                     "count": None if b is None else b.count,
                     "measured_ms": None if meas is None else _ms(meas),
                     "simulated_ms": None if sim is None else _ms(sim),
                     "error_pct": (sim.mean_s - meas.mean_s) / meas.mean_s * 100.0
                     if ok and sim is not None and meas is not None else None})
    rows.append(_front_and_delivery_row(m, sims))
    mean_in_flight = (sum(r.mean_in_flight for r in sims) / len(sims)) if sims else None
    return {"file": m.path, "engine": m.engine, "source": m.source, "boundaries": rows,
            "gauges": {"running": m.running, "kv_usage": m.kv_usage, "prefix_hit_rate": m.prefix_hit_rate,
                       "series": m.series, "simulated_mean_in_flight": mean_in_flight},
            "mean_isl": m.mean_isl, "mean_osl": m.mean_osl, "runs_pooled": len(sims)}


def _front_and_delivery_row(m: EngineMetrics, sims: Sequence[SimResult]) -> dict[str, Any]:
    """What the engine's TTFT holds outside its queue and prefill — the front end and the first-token delivery —
    as the scrape measures it (engine metric: mean TTFT − mean queue − mean prefill; means only, a difference of
    histograms has no percentiles) beside the simulated parts front_end + delivery."""
    import numpy as np

    parts = [b for b in (m.boundaries.get(k) for k in ("ttft", "queue", "prefill")) if b is not None]
    meas = parts[0].mean_s - parts[1].mean_s - parts[2].mean_s if len(parts) == 3 else None
    pooled = [r.samples["part:front_end"] + r.samples["part:delivery"] for r in sims if "part:front_end" in r.samples]
    sim = Stats.of(np.concatenate(pooled)) if pooled else None
    ok = meas is not None and sim is not None and meas > 0
    return {"boundary": "front_end+delivery",
            "series": None if meas is None else " − ".join(b.series for b in parts) + " (means)",
            "count": None if meas is None else parts[0].count,
            "measured_ms": None if meas is None else {"mean": meas * MS_PER_S, "p50": None, "p90": None, "p99": None},
            "simulated_ms": None if sim is None else _ms(sim),
            "error_pct": (sim.mean_s - meas) / meas * 100.0 if ok and sim is not None and meas is not None else None}


SWEEP_SCHEMA = "servescope.sweep/1"


def sweep_document(sw: Sweep) -> dict[str, Any]:
    """The `servescope.sweep/1` document: every (layout, concurrency) point and whether it is on the Pareto front
    of tok/s per GPU against tok/s per user."""
    points = [
        {"layout": p.layout.label(), "tp": p.layout.tp, "ep": p.layout.ep, "dp": p.layout.dp,
         "concurrency": p.concurrency, "tok_s_per_gpu": p.tok_s_per_gpu, "tok_s_per_user": p.tok_s_per_user,
         "tpot_ms": p.tpot_s * MS_PER_S, "ttft_ms": p.ttft_s * MS_PER_S, "output_tok_s": p.output_tok_s,
         "on_front": p.on_front}
        for p in sw.points
    ]
    doc: dict[str, Any] = {"schema": SWEEP_SCHEMA, "n_gpus": sw.n_gpus, "points": points, "skipped": list(sw.skipped)}
    if sw.sla is not None:  # the two tiers (planner.sweep.screen / simulate_front)
        for d, p in zip(points, sw.points, strict=True):
            d["sla_met"] = p.sla_met
            if p.simulated is not None:
                d["simulated"] = simulated_dict(p.simulated)
        ms = [None if v is None else v * MS_PER_S for v in (sw.sla.ttft_max_s, sw.sla.tpot_max_s)]
        doc["sla"] = {"ttft_max_ms": ms[0], "tpot_max_ms": ms[1], "screened": sw.screened, "passed": sw.passed,
                      "simulated": sw.simulated, "notes": list(sw.notes)}
    return doc


def model_sim_fields(res: SimResult) -> dict[str, Any]:
    """The simulated fields a `servescope.model/1` point gains with `model --simulate`."""
    return {
        "ttft_p50_ms": res.ttft.p50_s * MS_PER_S, "ttft_p99_ms": res.ttft.p99_s * MS_PER_S,
        "tpot_p50_ms": res.tpot.p50_s * MS_PER_S, "tpot_p99_ms": res.tpot.p99_s * MS_PER_S,
        "itl_p99_ms": res.itl.p99_s * MS_PER_S,
        "simulated": {"output_tok_s": res.output_tok_s, "ttft_mean_ms": res.ttft.mean_s * MS_PER_S,
                      "tpot_mean_ms": res.tpot.mean_s * MS_PER_S, "requests": res.requests,
                      "preemptions": res.queueing.preemptions, "queued": res.queueing.queued},
    }


def simulated_dict(m: Simulated) -> dict[str, Any]:
    """A sweep point's simulated closed loop in a document (ms; the SLA on its simulated means)."""
    return {"requests": m.requests, "ttft_mean_ms": m.ttft_mean_s * MS_PER_S, "ttft_p99_ms": m.ttft_p99_s * MS_PER_S,
            "tpot_mean_ms": m.tpot_mean_s * MS_PER_S, "tpot_p99_ms": m.tpot_p99_s * MS_PER_S,
            "output_tok_s": m.output_tok_s, "sla_met": m.sla_met}
