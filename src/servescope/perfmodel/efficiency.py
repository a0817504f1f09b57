"""Efficiency factors of the performance model: fractions of measured ceilings and fixed overheads.

What it does: defines `Efficiency` (frozen; every field is dimensionless or carries its unit) and builds the
defaults: the global fitted values of `data/efficiency.toml` (written by data-build/fit_efficiency.py from the dev
validation rows; how and when is recorded in the file) plus the measured per-kernel cost in a CUDA graph from
`data/engine_overheads.toml` (data-build/measure_engine_overheads.py, from real traces). Collective scales stay 1: the
measured curves are used as measured. The lookup still honours `<generation>`, `<generation>.<backend>` and
`<gpu name>` sections if a file has them; the shipped file has none (one global fit).
What it does not: fit anything (see validation.fit) or know about individual models.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

from servescope.errors import BadConfig
from servescope.specs import tables


@dataclass(frozen=True)
class Efficiency:
    """Multipliers on peaks (0-1] and overheads (seconds). `source` says where the numbers came from."""

    # bandwidth efficiencies are fractions of the GPU's *achieved* memory bandwidth (datasheet × hbm_bw_efficiency)
    gemm_bw_eff: float = 1.0  # dense/attention-projection GEMM weight reads
    moe_bw_eff: float = 0.9  # routed-expert (grouped) GEMMs
    attn_bw_eff: float = 0.9  # KV-cache reads in attention
    compute_eff: float = 0.6  # fraction of dense tensor-core peak reached by GEMMs
    moe_compute_eff: float = 0.45  # same for grouped expert GEMMs
    attn_compute_eff: float = 0.4  # same for attention (QK^T, PV)
    collective_latency_scale: float = 1.0  # multiplies the collective latency floor (rank skew in situ)
    collective_bw_scale: float = 1.0  # multiplies collective bus bandwidth
    kernel_overhead_s: float = 2.0e-6  # per kernel with CUDA graphs (launch gap + tail)
    launch_overhead_s: float = 8.0e-6  # per kernel without CUDA graphs (CPU launch)
    cpu_overhead_s: float = 1.0e-3  # per engine step (scheduler, sampling, detokenize)
    cpu_overhead_per_seq_s: float = 5.0e-6  # per sequence in the step
    # share of the step's CPU time an overlapping scheduler still leaves on the critical path (the sync of the
    # sampled tokens into the next step's inputs, output processing): 0 = all hidden, 1 = none (step.py)
    overlap_exposed_frac: float = 0.0
    prefill_overhead_s: float = 5.0e-3  # per prefill (request setup, tokenizer, first-token sampling)
    mla_prefill_layer_s: float = 0.0  # per MLA attention layer per prefill (latent-cache context path set-up)
    linear_prefill_layer_s: float = 0.0  # per linear-attention/Mamba layer per prefill (chunked-scan kernels)
    gemm_curve: float = 1.0  # 1: dense GEMMs on the GPU's measured curve where it has one (gemm_curve.py); 0: never
    # 1 (default): routed experts at aiconfigurator's measured per-op curve where one answers inside its domain and
    # the domain is not switched off by its dev rows' cross-validated error (curve_bounds.DOMAIN_OFF; issue 27,
    # bench/RESULTS.md); 0: roofline × fitted efficiency everywhere
    moe_curve: float = 1.0
    # 1: dense GEMMs and decode attention at aiconfigurator's measured per-op curves of the GPU and engine where they
    # cover the shape (measured_ops.py), the rest on the roofline × fitted efficiency; 0: roofline everywhere
    op_curves: float = 1.0
    prefill_eff: float = 1.0  # prefill kernels' efficiency relative to the decode ones (divides prefill time)
    prefill_interference: float = 1.0  # share of other requests' prefills landing inside a decode window
    ttft_queue_frac: float = 0.2  # mixed-step engines: share of a synchronised wave's first-token wait (serving.py)
    gpu_memory_utilization: float = 0.93  # share of HBM the engine may use
    reserve_bytes: float = 2.5e9  # activations, CUDA graphs, workspace per GPU
    source: str = "built-in defaults"

    def scaled(self, **changes: float) -> Efficiency:
        """A copy with some fields replaced (for what-ifs and fitting)."""
        return replace(self, **changes)  # type: ignore[arg-type]


_FLOAT_FIELDS = {f.name for f in fields(Efficiency) if f.name != "source"}


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tables.efficiency()


def _apply(eff: Efficiency, section: Any, where: str) -> Efficiency:
    if not isinstance(section, dict):
        return eff
    vals = {k: float(v) for k, v in section.items() if k in _FLOAT_FIELDS}
    bad = [k for k in section if k not in _FLOAT_FIELDS and not isinstance(section[k], dict)
           and k not in ("note", "fitted", "rows", "objective", "mape")]
    if bad:
        raise BadConfig(f"specs/data/efficiency.toml [{where}]: unknown keys {', '.join(bad)}")
    return replace(eff, **vals, source=f"efficiency.toml [{where}]") if vals else eff  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def measured_kernel_overhead_s() -> float:
    """Per-kernel cost of a decode step replayed in a CUDA graph (launch gap + the small kernels no roofline term
    prices), measured on vLLM's FULL-graph decode trace (data/engine_overheads.toml [vllm.graph]); the other
    engines replay graphs the same way and take the same number (transferred, no trace of theirs is bundled)."""
    doc = tables.engine_overheads()
    try:
        return float(doc["vllm"]["graph"]["per_kernel_us"]) * 1e-6
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"specs/data/engine_overheads.toml: {e}") from None


def unfitted_start() -> Efficiency:
    """The built-in defaults with the measured numbers in place: where a fit starts (data-build/fit_efficiency.py)."""
    return Efficiency(kernel_overhead_s=measured_kernel_overhead_s(), source="built-in defaults + measured")


def global_efficiency() -> Efficiency:
    """The global fit ([default]) with the measured numbers, before any per-backend section."""
    return _apply(unfitted_start(), _table().get("default"), "default")


def backend_overrides() -> dict[str, dict[str, float]]:
    """The [backend.<name>] sections: numbers an engine sets for itself (fitted, shrunk toward [default])."""
    sec = _table().get("backend")
    if not isinstance(sec, dict):
        return {}
    return {b: {k: float(v) for k, v in vals.items() if k in _FLOAT_FIELDS}
            for b, vals in sec.items() if isinstance(vals, dict)}


def roofline_efficiency() -> Efficiency:
    """The fit's first stage ([roofline]: every number with the measured per-op curves off, validation.fit.fit):
    what prices a GPU that has no curves; [default] where the file has no such section."""
    sec = _table().get("roofline")
    if not isinstance(sec, dict):
        return global_efficiency()
    return _apply(unfitted_start(), sec, "roofline").scaled(op_curves=0.0)


@lru_cache(maxsize=256)
def has_op_curves(gpu_name: str) -> bool:
    """Whether aiconfigurator's per-op curves cover this GPU (specs/data/opcurves)."""
    from servescope.errors import UnknownName
    from servescope.specs.hardware import resolve_gpu_name
    from servescope.specs.opcurves import opcurve_systems

    try:
        return resolve_gpu_name(gpu_name) in opcurve_systems()
    except UnknownName:
        return False


def default_efficiency(generation: str, backend: str, gpu_name: str | None = None) -> Efficiency:
    """Fitted defaults: [default] — or [roofline] for a GPU without measured per-op curves —, then the backend's
    [backend.<name>] section, then (if a file has them) [<generation>], [<generation>.<backend>], [<gpu name>]
    sections."""
    t = _table()
    eff = global_efficiency() if gpu_name is None or has_op_curves(gpu_name) else roofline_efficiency()
    be = backend.lower()
    if be in backend_overrides():
        eff = replace(eff, **backend_overrides()[be], source=f"efficiency.toml [default] + [backend.{be}]")
    for level in (generation.lower(), (gpu_name or "").lower()):
        g = t.get(level) if level else None
        eff = _apply(eff, g, level)
        if isinstance(g, dict):
            eff = _apply(eff, g.get(be), f"{level}.{be}")
    return eff
