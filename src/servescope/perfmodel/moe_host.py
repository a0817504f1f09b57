"""The expert-routing kernels of a decode step's MoE layers: a per-step cost the roofline terms do not price.

What it does: prices, for a decode step replayed in a CUDA graph, the routing / permute / finalize kernels each MoE
layer runs besides its expert GEMMs (pad, top-k, histogram or bitmatrix sums, memset, expert-index compute,
finalize-scatter), at their measured duration:
    t_routing = graphed · n_moe_layers · n_route · t_route                                   (seconds, per GPU)
with n_route the routing kernels per MoE layer and t_route the median duration of one, on the GPU's vendor, both
measured in real traces (specs/data/step_host_cost.toml, data-build/measure_step_host_cost.py). Their bytes are a few
kB at decode batches, so each runs at its floor: t_route does not depend on the batch (measured at batch 32 in
vLLM's FULL-graph decode, and at 888 prompt tokens on B200 — at most the decode floor). Every GPU of a TP/EP group
runs them for all of the step's tokens, so they do not divide by the parallelism. Zero for a dense model.
Why it is not in the other terms: the roofline prices the `moe` class by expert bytes and FLOPs; the measured
per-kernel overhead in a graph (kernel_overhead_s, engine_overheads.toml) is the idle time and the unpriced small
classes (norm, rotary, cast, ...) per kernel, and the routing kernels are classified `moe`, so neither holds them.
Assumptions: every MoE stack runs the measured trace's count (transferred; TRT-LLM-gen's stack runs 4 on B200, the
triton_kernels one 6); an eager step (no graph: prefill, decode beyond the capture sizes) hides them behind its
per-kernel launch cost (launch_overhead_s ≥ t_route), so they cost nothing there; a measured MoE curve (when on)
prices the whole MoE layer including them, so combine.py drops this term where it is used.
What it does not: time the sampler or the scheduler (the step's host time is cpu_overhead_s) or read traces.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables

_FILE = "specs/data/step_host_cost.toml"


@lru_cache(maxsize=1)
def routing_constants() -> dict[str, float]:
    """[model] of step_host_cost.toml: routing_kernels_per_moe_layer and routing_kernel_us_<vendor> (µs)."""
    sec = tables.step_host_cost().get("model")
    if not isinstance(sec, dict):
        raise BadConfig(f"{_FILE}: no [model] section")
    out: dict[str, float] = {}
    for k, v in sec.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise BadConfig(f"{_FILE} [model]: {k} = {v!r} is not a number") from None
    if "routing_kernels_per_moe_layer" not in out:
        raise BadConfig(f"{_FILE} [model]: missing routing_kernels_per_moe_layer")
    return out


def routing_kernel_s(vendor: str) -> float:
    """Measured duration of one routing kernel on a GPU of this vendor (seconds)."""
    key = f"routing_kernel_us_{vendor.lower()}"
    c = routing_constants()
    if key not in c:
        known = sorted(k.removeprefix("routing_kernel_us_") for k in c if k.startswith("routing_kernel_us_"))
        raise BadConfig(f"{_FILE} [model]: missing {key} (vendors measured: {', '.join(known)})")
    return c[key] * 1e-6


def routing_s_per_moe_layer(vendor: str) -> float:
    """n_route · t_route: the routing kernels of one MoE layer (seconds)."""
    return routing_constants()["routing_kernels_per_moe_layer"] * routing_kernel_s(vendor)


def moe_routing_s(n_moe_layers: int, vendor: str, graphed: np.ndarray) -> np.ndarray:
    """graphed · n_moe_layers · n_route · t_route (seconds; module docstring), broadcast over `graphed` (1.0 where
    the step replays a CUDA graph, else 0.0)."""
    g = np.asarray(graphed, dtype=float)
    if n_moe_layers <= 0:
        return np.zeros_like(g)
    return g * (n_moe_layers * routing_s_per_moe_layer(vendor))
