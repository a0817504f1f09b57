"""The `servescope.model/1` JSON document of a model sweep (a list of ServingPoint). Presentation only: fields
are copied from the points and converted to the document's units (ms, GB) through servescope.units; nothing is
modelled here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servescope.calibrate.measured import MeasuredModel
from servescope.perfmodel import TERMS, ServingPoint
from servescope.report.measured_doc import measured_document
from servescope.report.simulate_doc import model_sim_fields
from servescope.simulate import SimResult, Stats
from servescope.simulate.percentiles import PointPercentiles
from servescope.units import GIGA, MS_PER_S

SCHEMA = "servescope.model/1"


def model_document(points: Sequence[ServingPoint], simulated: Mapping[int, SimResult] | None = None,
                   measured: MeasuredModel | None = None,
                   percentiles: Mapping[int, PointPercentiles] | None = None) -> dict[str, Any]:
    """The `servescope.model/1` JSON document (pure; the CLI renders it). `simulated` (`model --simulate`): a run
    per concurrency, whose fields (simulate_doc.model_sim_fields) join the point of that concurrency. `measured`
    (`model --measured`): the levels the user's figures set, what was used and what set aside. `percentiles`
    (simulate.percentiles): each point's p50/p90/p99 and its source, then the precision tier of each number."""
    sims, pcts = simulated or {}, percentiles or {}
    tpot_tier = "calibrated" if measured is not None and measured.case != "uncalibrated" else "closed form"
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "points": [
            _point(p) | (model_sim_fields(sims[p.concurrency]) if p.concurrency in sims else {})
            | (_percentiles(pcts[p.concurrency], tpot_tier) if p.concurrency in pcts else {})
            for p in points
        ],
    }
    if measured is not None:
        doc["calibration"] = measured_document(measured.fit) | {"case": measured.case, "used": list(measured.used),
                                                                "notes": list(measured.notes)}
    return doc


def _stats_ms(st: Stats) -> dict[str, float]:
    return {"p50": st.p50_s * MS_PER_S, "p90": st.p90_s * MS_PER_S, "p99": st.p99_s * MS_PER_S}


def _percentiles(q: PointPercentiles, tpot_tier: str) -> dict[str, Any]:
    """`percentiles` (ms, its source, utilisation, the TTFT lower-bound flag) and `precision` (each number's tier:
    closed form, simulation, calibrated)."""
    return {
        "percentiles": {"source": q.source, "precision": q.precision, "requests": q.requests,
                        "ttft_ms": _stats_ms(q.ttft), "tpot_ms": _stats_ms(q.tpot), "itl_ms": _stats_ms(q.itl),
                        "utilisation": q.utilisation, "ttft_lower_bound": q.ttft_lower_bound},
        # the percentiles run the calibrated scenario where the TPOT is calibrated (cli model: sim on fit.apply)
        "precision": {"tpot_ms": tpot_tier, "ttft_ms": "closed form",
                      "percentiles": f"{q.precision}, calibrated" if tpot_tier == "calibrated" else q.precision},
    }


def _point(p: ServingPoint) -> dict[str, Any]:
    return {
        "concurrency": p.concurrency,
        "tpot_ms": p.tpot_s * MS_PER_S,
        "ttft_ms": p.ttft_s * MS_PER_S,
        "tpot_ms_low": p.tpot_low_s * MS_PER_S,
        "tpot_ms_high": p.tpot_high_s * MS_PER_S,
        "ttft_ms_low": p.ttft_low_s * MS_PER_S,
        "ttft_ms_high": p.ttft_high_s * MS_PER_S,
        "provenance": dict(p.provenance),
        "output_tok_s": p.output_tok_s,
        "memory_gb_per_gpu": p.memory_bytes_per_gpu / GIGA,
        "max_concurrency": p.max_concurrency,
        "dominant": p.dominant,
        "terms_ms": {k: p.terms_s[k] * MS_PER_S for k in TERMS},
        "decode_step_ms": p.step_time_s * MS_PER_S,
        "floor_ms": p.floor_s * MS_PER_S,
        "batch": p.batch,
        "queued": p.concurrency > p.batch,
        "collectives": {
            k: {"calls_per_step": v.calls_per_step, "bytes_per_call": v.bytes_per_call,
                "time_ms": v.time_s * MS_PER_S}
            for k, v in p.collectives.items()
        },
    }
