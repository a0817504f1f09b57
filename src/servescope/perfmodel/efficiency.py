"""Efficiency factors of the performance model: fractions of hardware peaks and fixed overheads.

What it does: defines `Efficiency` (frozen; every field is dimensionless or carries its unit) and loads its
defaults per (GPU generation, backend) from `data/efficiency.toml`, which bench/fit_efficiency.py writes from the
dev validation rows (how and when is recorded in the file). Lookup order: `<generation>.<backend>`, then
`<generation>`, then `default`; each level overrides only the keys it names; a `[<gpu name>]` section (and
`[<gpu name>.<backend>]`) overrides its generation, for GPUs whose memory system differs from their siblings.
What it does not: fit anything (see perfmodel.fit) or know about individual models.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from servescope.errors import BadConfig


@dataclass(frozen=True)
class Efficiency:
    """Multipliers on peaks (0-1] and overheads (seconds). `source` says where the numbers came from."""

    gemm_bw_eff: float = 0.8  # fraction of HBM bandwidth dense/attention-projection GEMM weight reads reach
    moe_bw_eff: float = 0.7  # same for routed-expert (grouped) GEMMs
    attn_bw_eff: float = 0.7  # same for KV-cache reads in attention
    compute_eff: float = 0.6  # fraction of dense tensor-core peak reached by GEMMs
    moe_compute_eff: float = 0.45  # same for grouped expert GEMMs
    attn_compute_eff: float = 0.4  # same for attention (QK^T, PV)
    collective_latency_scale: float = 1.0  # multiplies the collective latency floor (rank skew in situ)
    collective_bw_scale: float = 1.0  # multiplies collective bus bandwidth
    kernel_overhead_s: float = 2.0e-6  # per kernel with CUDA graphs (launch gap + tail)
    launch_overhead_s: float = 8.0e-6  # per kernel without CUDA graphs (CPU launch)
    cpu_overhead_s: float = 1.0e-3  # per engine step (scheduler, sampling, detokenize)
    cpu_overhead_per_seq_s: float = 5.0e-6  # per sequence in the step
    prefill_overhead_s: float = 5.0e-3  # per prefill (request setup, tokenizer, first-token sampling)
    mla_prefill_layer_s: float = 0.0  # per MLA attention layer per prefill (latent-cache context path set-up)
    linear_prefill_layer_s: float = 0.0  # per linear-attention/Mamba layer per prefill (chunked-scan kernels)
    prefill_eff: float = 1.0  # prefill kernels' efficiency relative to the decode ones (divides prefill time)
    prefill_interference: float = 1.0  # share of other requests' prefills landing inside a decode window
    ttft_queue_frac: float = 0.5  # share of the other in-flight requests' prefills a new request waits for
    ttft_queue_exp: float = 1.0  # queue grows as (c − 1)^exp: 1 = synchronised waves, < 1 = waves spread out
    gpu_memory_utilization: float = 0.93  # share of HBM the engine may use
    reserve_bytes: float = 2.5e9  # activations, CUDA graphs, workspace per GPU
    source: str = "built-in defaults"

    def scaled(self, **changes: float) -> Efficiency:
        """A copy with some fields replaced (for what-ifs and fitting)."""
        return replace(self, **changes)  # type: ignore[arg-type]


_FLOAT_FIELDS = {f.name for f in fields(Efficiency) if f.name != "source"}


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    path = resources.files("servescope.perfmodel").joinpath("data", "efficiency.toml")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BadConfig(f"perfmodel/data/efficiency.toml: {e}") from None


def _apply(eff: Efficiency, section: Any, where: str) -> Efficiency:
    if not isinstance(section, dict):
        return eff
    vals = {k: float(v) for k, v in section.items() if k in _FLOAT_FIELDS}
    bad = [k for k in section if k not in _FLOAT_FIELDS and not isinstance(section[k], dict)
           and k not in ("note", "fitted", "rows", "objective", "mape")]
    if bad:
        raise BadConfig(f"perfmodel/data/efficiency.toml [{where}]: unknown keys {', '.join(bad)}")
    return replace(eff, **vals, source=f"efficiency.toml [{where}]") if vals else eff  # type: ignore[arg-type]


def default_efficiency(generation: str, backend: str, gpu_name: str | None = None) -> Efficiency:
    """Fitted defaults for a GPU generation (e.g. "hopper", "blackwell") and backend (vllm|sglang|trtllm).
    A section named after the GPU itself (e.g. [rtx_pro_6000_server]) overrides its generation's values."""
    t = _table()
    eff = _apply(Efficiency(), t.get("default"), "default")
    be = backend.lower()
    for level in (generation.lower(), (gpu_name or "").lower()):
        g = t.get(level) if level else None
        eff = _apply(eff, g, level)
        if isinstance(g, dict):
            eff = _apply(eff, g.get(be), f"{level}.{be}")
    return eff
