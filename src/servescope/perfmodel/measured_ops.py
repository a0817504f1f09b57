"""Where the step model prices a kernel class from a measured per-op curve instead of the datasheet roofline.

What it does: `moe_layer_s(sc, tokens)` — the routed experts of one MoE layer on one GPU, measured by
aiconfigurator-core on this GPU with this engine (opcurve.py; nearest measured engine version, shape scaled by
hidden·inter): time at the step's tokens, with the expert loads of the scenario's routing (skewed → the
power_law_1.01 rows, AIC-MOE-PL in specs/data/routing.toml; uniform → balanced). Used as measured, no fitted
efficiency on top, when Efficiency.moe_curve = 1; off in the shipped defaults, because on the dev rows the curve as
measured is slower than the served steps imply (leave-one-model-out TPOT 21.1 % → 28.3 %, bias +7.7 %). None where no curve covers the case
(GPU, engine, dtype, experts/top-k, moe_tp/ep), a measured routing histogram, or curves turned off: the roofline
× fitted efficiency prices it then, and `describe` says which.
What it does not: price the all-to-all (step.py) or dense GEMMs and attention (their curves are not wired yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import opcurve

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment


def _distribution(sc: Deployment) -> str | None:
    return {"skewed": "power_law_1.01", "uniform": "balanced"}.get(sc.routing.kind)


def moe_layer_s(sc: Deployment, tokens: np.ndarray) -> np.ndarray | None:
    """Seconds of one MoE layer's routed experts on one GPU at `tokens` tokens in the step (module docstring)."""
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers or dist is None:
        return None
    t = opcurve.moe_time_s(sc.gpu.name, sc.backend, sc.engine_version, sc.quant.experts.name,
                           np.maximum(np.asarray(tokens, dtype=float), 1.0), m.hidden_size, m.moe_intermediate_size,
                           m.top_k, m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist)
    return None if t is None or not np.all(np.isfinite(t)) else np.asarray(t, dtype=float)


def describe(sc: Deployment) -> str:
    """Provenance of the routed-expert time, in words."""
    m, dist = sc.model, _distribution(sc)
    if not m.n_moe_layers:
        return ""
    if dist is None:
        return "routed experts: roofline × fitted efficiency (a measured routing histogram has no per-op curve)"
    text = opcurve.describe("moe", sc.gpu.name, sc.backend, sc.engine_version, dtype=sc.quant.experts.name,
                            hidden=m.hidden_size, inter=m.moe_intermediate_size, topk=m.top_k,
                            experts=m.n_routed_experts, tp=sc.moe_tp, ep=sc.ep, distribution=dist)
    if text.startswith("no curve"):
        return f"routed experts: datasheet roofline × fitted efficiency ({text})"
    if sc.efficiency.moe_curve < 0.5:
        return ("routed experts: datasheet roofline × fitted efficiency (a measured curve exists but is off by "
                f"default: Efficiency.moe_curve; {text})")
    return f"routed experts: {text}"
