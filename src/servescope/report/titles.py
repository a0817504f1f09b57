"""The one scenario title: what was modelled, with the names as resolved (`--gpu h100` is h100_sxm).

Does: build the line every command's text and page put above a scenario's numbers (model, sweep, simulate, plan).
Does not: format numbers of a result.
"""

from __future__ import annotations

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
