"""Ranges and provenance of a prediction: an 80 % interval from cross-validated error, and where each input came from.

What it does: reads `data/ranges.json` (written by data-build/validation_report.py from ONE cross-validation run of
the dev CSV; never hand-typed): per case, the 10th and 90th percentiles of measured/predicted for TPOT and TTFT
over out-of-fold predictions, and which systems, generations and vendors have measured serving rows. A scenario's
case follows from its GPU:
  system_seen        the GPU itself has measured rows      → errors of leave-one-model-out folds
  system_unseen      a sibling of its generation has rows  → errors of leave-one-system-out folds
  generation_unseen  its vendor has rows, not its generation → errors of leave-one-generation-out folds
  vendor_unseen      no measured row for its vendor (AMD today) → the generation_unseen interval widened ×2 in
                     log space: a rule, not a measurement (nothing measured backs it)
The interval of a predicted value v is [v·q10, v·q90]. `provenance(sc)` says which inputs were measured on this
GPU, transferred from another one, or datasheet × a default.
What it does not: compute the quantiles (data-build/validation_report.py) or change a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from servescope.errors import BadConfig
from servescope.perfmodel import gemm_curve, hw, measured_ops
from servescope.perfmodel.routing import describe as routing_describe
from servescope.perfmodel.step import (
    measured_attention,
    model_for,
    moe_curve_over_roofline,
    per_scenario,
)
from servescope.specs import tables

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario

CASES = ("system_seen", "system_unseen", "generation_unseen", "vendor_unseen")
VENDOR_WIDEN = 2.0  # vendor_unseen: log-space widening of the generation_unseen interval (a stated rule)


@dataclass(frozen=True)
class RangeTable:
    quantiles: dict[str, dict[str, tuple[float, float]]]  # case -> metric ("tpot"|"ttft") -> (q10, q90) of meas/pred
    systems: frozenset[str]
    generations: frozenset[str]
    vendors: frozenset[str]
    source: str


@lru_cache(maxsize=1)
def range_table() -> RangeTable:
    doc = tables.error_ranges()
    try:
        q = {c: {m: (float(v[m][0]), float(v[m][1])) for m in ("tpot", "ttft")} for c, v in doc["cases"].items()}
        gen = q["generation_unseen"]
        q["vendor_unseen"] = {m: (gen[m][0] ** VENDOR_WIDEN, gen[m][1] ** VENDOR_WIDEN) for m in ("tpot", "ttft")}
        return RangeTable(q, frozenset(doc["systems"]), frozenset(doc["generations"]), frozenset(doc["vendors"]),
                          str(doc["source"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise BadConfig(f"specs/data/ranges.json: {e}") from None


def case_for(system: str, generation: str, vendor: str) -> str:
    """Which cross-validated error applies to a GPU (module docstring)."""
    t = range_table()
    if system in t.systems:
        return "system_seen"
    if generation in t.generations:
        return "system_unseen"
    if vendor in t.vendors:
        return "generation_unseen"
    return "vendor_unseen"


def scenario_case(sc: Scenario) -> str:
    g = sc.gpu
    systems = range_table().systems
    name = next((s for s in (g.name, g.name + "_sxm") if s in systems), g.name)
    return case_for(name, g.generation, g.vendor)


def bounds(case: str, metric: str) -> tuple[float, float]:
    """(q10, q90) multipliers of the predicted value for a case and metric ("tpot" | "ttft")."""
    return range_table().quantiles[case][metric]


@lru_cache(maxsize=1)
def _change_table() -> dict[str, tuple[float, float, int]]:
    try:
        doc = tables.error_ranges().get("change_error", {})
        return {c: (float(v["tpot"][0]), float(v["tpot"][1]), int(v["pairs"])) for c, v in doc.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise BadConfig(f"specs/data/ranges.json change_error: {e}") from None


def change_bounds(case: str) -> tuple[float, float, int] | None:
    """(q10, q90, pairs) of measured/predicted for a RATIO of two TPOTs on the same box at the same load (another
    parallel layout), out of fold (ranges.json `change_error`, data-build/validation_report.py); None for a case with no
    measured pairs (vendor_unseen)."""
    return _change_table().get(case)


_PROV: dict[tuple[int, int, str | None], tuple[object, dict[str, str]]] = {}


def provenance(sc: Scenario) -> dict[str, str]:
    """Where the inputs of this scenario's prediction come from, in words (one entry per input); cached per
    (GPU object, TP, interconnect), the only scenario fields it depends on, except the CPU entry (the engine's)."""
    key = (id(sc.gpu), sc.tp, sc.interconnect)
    hit = _PROV.get(key)
    if hit is not None and hit[0] is sc.gpu:
        return {**hit[1], **_engine_provenance(sc)}  # the engine entries depend on the engine: never cached
    out = _provenance(sc)
    _PROV[key] = (sc.gpu, out)  # keeps the GPU alive so its id stays unique
    return {**out, **_engine_provenance(sc)}


def _engine_provenance(sc: Scenario) -> dict[str, str]:
    """The engine-dependent entries: CPU time, the engine defaults used, the KV pool's share, the routing."""
    frac, of, where = sc.memory_share
    out = {"cpu_overhead": _cpu_provenance(sc), "engine_defaults": sc.engine.label,
           "kv_pool": f"{frac:g} of {'total' if of == 'total' else 'free'} GPU memory ({where}), KV {sc.quant.kv.name}"}
    out["dense_gemms"] = str(per_scenario("describe_dense", sc,
                                           lambda: measured_ops.describe_dense(sc, model_for(sc).gemms)))
    out["attention"] = str(per_scenario("describe_attention", sc,
                                         lambda: measured_ops.describe_attention(sc, measured_attention(sc))))
    if sc.model.n_routed_experts:
        out["routing"] = routing_describe(sc.routing, sc.model.model_type)
        out["experts"] = measured_ops.describe(sc, moe_curve_over_roofline(sc))
    return out


def _cpu_provenance(sc: Scenario) -> str:
    """Where the step's CPU time comes from and whether it adds to the step (docs/model.md §2)."""
    fitted = "fitted globally (cpu_overhead_s + cpu_overhead_per_seq_s · batch, data/efficiency.toml)"
    if not sc.overlaps_cpu:
        why = "as set" if sc.overlap_scheduler is not None else f"no overlap by default in {sc.engine.label}"
        return f"{fitted}; adds to every step ({why})"
    why = "as set" if sc.overlap_scheduler is not None else f"the default of {sc.engine.label}"
    return f"{fitted}; hidden behind the GPU step where shorter ({why})"


def _provenance(sc: Scenario) -> dict[str, str]:
    g, case = sc.gpu, scenario_case(sc)
    rows = {
        "system_seen": f"measured serving rows on {g.name} are in the fit and in the cross-validation",
        "system_unseen": f"no measured serving rows on {g.name}; its generation ({g.generation}) has some",
        "generation_unseen": f"no measured serving rows on {g.name} or its generation ({g.generation})",
        "vendor_unseen": f"no measured serving rows on any {g.vendor.upper()} GPU: the range is a widened guess",
    }[case]
    bw_src = g.sources.get("hbm_bw_efficiency", "")
    bw = ("measured on this GPU: " if "not measured" not in bw_src and "measured" in bw_src.lower()
          else "datasheet × default: ") + (bw_src or "aiconfigurator's 0.8 (no source in the GPU file)")
    out = {"case": case, "serving_rows": rows, "memory_bandwidth": bw,
           "compute": gemm_curve.describe(g),
           "kernel_overhead": "measured on a vLLM CUDA-graph decode trace (data/engine_overheads.toml), "
                              "transferred to every GPU and engine"}
    if sc.tp > 1:
        curves = hw.load_curves(g, sc.tp, sc.interconnect)
        c = curves.vllm_all_reduce
        out["all_reduce"] = ("transferred/derived: " if c.derived else f"measured on {g.name}: ") + c.source
    return out
