"""The one scenario title and the one scenario document: what was modelled, with the names as resolved
(`--gpu h100` is h100_sxm).

Does: build the line every command's text and page put above a scenario's numbers (model, sweep, simulate, plan),
and the `scenario` key of their JSON documents (`scenario_document`, with `assumed_engine`: what the prediction
assumed about the engine).
Does not: format numbers of a result. Imports nothing of the planner: `simulate` and `model` use these without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servescope.perfmodel.memory import kv_cache_tokens

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario


def scenario_title(sc: Scenario, *, layout: bool = True, backend: bool = False, display_name: bool = False,
                   n_gpus: int | None = None) -> str:
    """`<model> on <n>× <gpu> (TP= EP= PP= DP=), ISL i / OSL o[, backend]`; `layout=False` (with the sweep's
    `n_gpus`) for a sweep of layouts, `display_name` adds the GPU's marketing name."""
    gpu = sc.gpu.name
    if display_name and sc.gpu.display_name:
        gpu = f"{gpu} ({sc.gpu.display_name})"
    where = f" (TP={sc.tp} EP={sc.ep} PP={sc.pp} DP={sc.dp})" if layout else ""
    tail = f", {sc.backend}" if backend else ""
    return f"{sc.model.name} on {n_gpus or sc.n_gpus}× {gpu}{where}, ISL {sc.isl} / OSL {sc.osl}{tail}"


def scenario_document(sc: Scenario | None) -> dict[str, Any] | None:
    """The scenario's names and layout, with the resolved GPU spec name (e.g. `h100` → h100_sxm), its
    quantization (scheme per model part) and engine: what every page shows above a scenario's numbers."""
    if sc is None:
        return None
    q = sc.quant
    return {"model": sc.model.name, "gpu": sc.gpu.name, "gpu_display_name": getattr(sc.gpu, "display_name", ""),
            "tp": sc.tp, "ep": sc.ep, "pp": sc.pp, "dp": sc.dp, "gpus": sc.n_gpus, "isl": sc.isl, "osl": sc.osl,
            "backend": sc.backend, "cuda_graphs": sc.cuda_graphs,
            "quant": {"attention": q.attention.name, "dense_mlp": q.dense_mlp.name, "experts": q.experts.name,
                      "shared_experts": q.shared_experts.name, "lm_head": q.lm_head.name, "kv": q.kv.name},
            "assumed": assumed_engine(sc)}


def assumed_engine(sc: Scenario) -> dict[str, Any]:
    """What the prediction assumed about the engine: its version's defaults, the KV pool (the tokens an engine log
    prints as its KV cache size), the overlap scheduler, the routing and whether the run is decode-only."""
    frac, of, where = sc.memory_share
    return {"engine_version": sc.engine_version or None, "engine_defaults": sc.engine.label,
            "overlap_scheduler": sc.overlaps_cpu, "kv_dtype": sc.quant.kv.name,
            "gpu_memory_utilization": frac, "memory_share_of": of, "memory_share_source": where,
            "kv_cache_tokens": kv_cache_tokens(sc), "routing": sc.routing.kind, "decode_only": sc.decode_only}
