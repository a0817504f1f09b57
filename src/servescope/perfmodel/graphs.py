"""CUDA graphs against eager decode: the padding of a graphed step, and the host dispatch of an eager one.

What it does:
`padded_tokens` — for a decode step of `t` tokens per rank, whether it replays a captured graph (t ≤ the largest
captured size) and the size it runs at (the next captured size ≥ t; eager steps run at t). The sizes are the resolved
engine record's (`sc.engine.graphs.capture_sizes`: engine, release and GPU memory), the one the simulation's steps are
priced with too. Prefill chunks run eagerly here.
`eager_host_s` — the host (CPU) time of a decode step that runs eagerly: every kernel is issued by the engine's Python
forward, one torch op at a time (Python, the ATen dispatcher, cudaLaunchKernel), while a graph replay issues them all
with one launch:
    t_host = (1 − graphed) · (1 − prefill) · n_ops · t_kernel                       (seconds, per rank)
    n_ops  = kernels of the step on one GPU (`eager_ops_per_step`) + its collective calls (each one op on the host)
    t_kernel = host seconds per launched kernel of an eager Python LLM forward (specs/data/eager_host.toml
               [dispatch]: gpt-fast's eager Llama-2-7B, 39.2 ms per token over its 1,688 kernels = 23.2 µs)
The GPU cannot run ahead of the host, so the step takes max(GPU time, t_host) (combine.eager_launches charges what
exceeds the GPU time): host-bound where the GPU's work per kernel is small (batch 1, many small kernels), no cost
where the GPU is the slower side (large batches, long prefill chunks).
Domain: a deployment run without CUDA graphs. A graphs-on deployment's decode beyond the engine record's largest
captured size keeps the GPU-side launch cost alone (as before): served recipes raise the capture range above the
engine default (TRT-LLM cuda_graph_config.max_batch_size), and the dev rows say those steps are not host-bound —
18 TRT-LLM rows at concurrency 144–384 (default capture ≤ 128) measured 7.8–53 ms where the host dispatch would
price up to 2× that (tests/data/validation/measured_serving_dev.csv; TPOT MAPE 17.4 → 17.5 % with it).
Assumptions: every rank of a TP/EP group dispatches its own kernels in its own process at once, so t_host is one
rank's (no CPU contention between ranks is priced, nor the wait for the slowest rank at each collective); t_kernel is
transferred from gpt-fast's A100 host and code to every engine and CPU (no per-CPU scaling; Python module and view
overhead per kernel varies by code: bare op loops run ~2.5 µs per launch, Python-heavy models ~45 µs,
eager_host.toml cross_check); the forward has no host synchronisation (a `.item()` inside the forward serialises the
host and the GPU: step = GPU + host, not priced); prefill chunks are not host-bound at the prompt sizes served (their
GPU time is milliseconds per layer block) and vLLM runs them in piecewise graphs: 0 there.
`eager_ops_per_step` — the step's kernels on one GPU, with a measured count used only inside its domain: a trace of
specs/data/kernel_counts.toml counted on the scenario's engine and model family (eager_host.toml [domain.*]) gives
layers · (attention + MLP per layer) + per step as measured; elsewhere the architecture count (ops.kernels_per_step).
What it does not: model piecewise graphs of mixed batches (simulate/ does), price the per-kernel GPU-side launch gap
(Efficiency.launch_overhead_s, combine.kernel_overhead) or the scheduler's host time (combine.host_cpu_s).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

_FILE = "specs/data/eager_host.toml"


def padded_tokens(sizes: Sequence[int], tokens: np.ndarray, graphs: bool) -> tuple[np.ndarray, np.ndarray]:
    """(graphed 1.0/0.0, tokens the step runs at) for decode steps of `tokens` tokens per rank, with the captured
    decode batch sizes `sizes` (ascending; an engine record's `graphs.capture_sizes`)."""
    t = np.asarray(tokens, dtype=float)
    if not graphs:
        return np.zeros_like(t), t
    captured = np.asarray(sizes, dtype=float)
    idx = np.searchsorted(captured, t - 1e-9)
    inside = idx < len(captured)
    padded = np.where(inside, captured[np.minimum(idx, len(captured) - 1)], t)
    return inside.astype(float), padded


@lru_cache(maxsize=1)
def _doc() -> dict[str, Any]:
    return tables.read_toml("eager_host.toml")


def host_s_per_kernel() -> float:
    """t_kernel: host seconds per launched kernel of an eager Python forward ([dispatch] host_us_per_kernel)."""
    try:
        us = float(_doc()["dispatch"]["host_us_per_kernel"])
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"{_FILE} [dispatch]: host_us_per_kernel missing or not a number ({e})") from None
    if not us > 0:
        raise BadConfig(f"{_FILE} [dispatch]: host_us_per_kernel = {us} is not positive")
    return us * 1e-6


def measured_domain(engine: str, model_type: str) -> str | None:
    """The kernel_counts.toml trace counted on this engine and model family, or None (eager_host.toml [domain.*])."""
    doms = _doc().get("domain") or {}
    if not isinstance(doms, dict):
        raise BadConfig(f"{_FILE}: [domain] is not a table")
    for name, d in doms.items():
        if not isinstance(d, dict) or not {"engine", "model_type", "trace"} <= set(d):
            raise BadConfig(f"{_FILE} [domain.{name}]: needs engine, model_type and trace")
        if d["engine"] == engine.lower() and d["model_type"] == model_type:
            return str(d["trace"])
    return None


def _trace_kernels(trace: str, layers: int) -> float:
    """layers · (attention + MLP kernels per layer) + the step's own kernels, as counted in the trace."""
    sec = (tables.kernel_counts().get("trace") or {}).get(trace)
    if not isinstance(sec, dict):
        raise BadConfig(f"specs/data/kernel_counts.toml: no [trace.{trace}] (named by {_FILE})")
    try:
        per_layer = float(sec["attention_per_layer"]) + float(sec["mlp_per_layer"])
        return layers * per_layer + float(sec["step_kernels"])
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"specs/data/kernel_counts.toml [trace.{trace}]: {e} (named by {_FILE})") from None


def eager_ops_per_step(sc: Deployment, architecture_kernels: float) -> tuple[float, str]:
    """(kernels of one eager decode step on one GPU, where the count comes from): the measured trace of the
    scenario's engine and model family where one exists (its layers are the model's), else `architecture_kernels`
    (ops.kernels_per_step: per layer part, from the model's layer list)."""
    trace = measured_domain(sc.backend, sc.model.model_type)
    if trace is None:
        return float(architecture_kernels), "architecture count (perfmodel/ops.py kernels_per_step)"
    return _trace_kernels(trace, sc.model.n_layers), f"measured: kernel_counts.toml [trace.{trace}]"


def eager_host_s(n_ops: float, graphed: Any, prefill: bool, graphs_on: bool) -> np.ndarray:
    """t_host = (1 − graphed) · n_ops · t_kernel for a decode step of a deployment run without CUDA graphs
    (`graphs_on` False: --enforce-eager, --disable-cuda-graph), 0 for a prefill chunk and for a graphs-on deployment
    (seconds, per rank; module docstring), broadcast over `graphed` (1.0 where the step replays a CUDA graph)."""
    g = np.asarray(graphed, dtype=float)
    if prefill or graphs_on:
        return np.zeros_like(g)
    return (1.0 - g) * (float(n_ops) * host_s_per_kernel())
