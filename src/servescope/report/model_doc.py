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
from servescope.simulate import SimResult
from servescope.units import GIGA, MS_PER_S

SCHEMA = "servescope.model/1"


def model_document(points: Sequence[ServingPoint], simulated: Mapping[int, SimResult] | None = None,
                   measured: MeasuredModel | None = None) -> dict[str, Any]:
    """The `servescope.model/1` JSON document (pure; the CLI renders it). `simulated` (`model --simulate`): a run
    per concurrency, whose fields (simulate_doc.model_sim_fields) join the point of that concurrency. `measured`
    (`model --measured`): the levels the user's figures set, what was used and what set aside."""
    sims = simulated or {}
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "points": [
            _point(p) | (model_sim_fields(sims[p.concurrency]) if p.concurrency in sims else {})
            for p in points
        ],
    }
    if measured is not None:
        doc["calibration"] = measured_document(measured.fit) | {"case": measured.case, "used": list(measured.used),
                                                                "notes": list(measured.notes)}
    return doc


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
