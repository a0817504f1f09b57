"""The step model's types: one step's efficiency-free parts (`StepParts`, per collective `CollParts`) and its
prediction (`StepPrediction`), with the array helpers the fit and the serving model use on parts (map, stack).
What it does not: compute anything (step.py builds the parts, combine.py applies the efficiencies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TERMS = ("weights", "kv", "compute", "communication", "overhead", "indexer", "recurrent")
# The step's time by model class (`StepPrediction.class_time_s`): the kernel classes the model prices (gemm, moe,
# attention, communication; a trace's classes of the same names), the per-kernel launch / graph-replay overhead
# and MoE routing kernels (KERNEL_OVERHEAD: a trace's small kernels, norms among them, and its launch gaps), and
# the per-step host (CPU) time the GPU does not hide (HOST: between a trace's GPU spans). They sum to the step.
KERNEL_OVERHEAD, HOST = "kernel_overhead", "host"
STEP_CLASSES = ("gemm", "moe", "attention", "communication", KERNEL_OVERHEAD, HOST)
Arr = np.ndarray
ArrayLike = float | int | Arr | list[int] | list[float]


@dataclass(frozen=True)
class CollectiveCost:
    calls_per_step: int
    bytes_per_call: float
    time_s: float  # all calls of this collective in the step


@dataclass(frozen=True)
class StepPrediction:
    step_time_s: float
    terms_s: dict[str, float]  # TERMS; they add up to step_time_s
    dominant: str
    collectives: dict[str, CollectiveCost]
    floor_s: float
    class_time_s: dict[str, float]  # STEP_CLASSES; they add up to step_time_s
    batch: int
    tokens: int  # tokens processed in the step (all dp ranks)
    context_len: int
    kind: str  # "decode" | "prefill"


@dataclass(frozen=True)
class CollParts:
    """One collective in a step, efficiency-free: calls, bytes per call, summed latency and bandwidth parts (s)."""

    calls: int
    bytes_per_call: Arr
    latency_s: Arr
    bandwidth_s: Arr


@dataclass(frozen=True)
class StepParts:
    """Efficiency-free times of one step (arrays, broadcast over the points): each class at 100 % of its
    ceiling (memory over achieved BW, compute over peak), collectives on the measured curves, kernel count."""

    mem_gemm_s: Arr
    comp_gemm_s: Arr
    mem_moe_s: Arr
    comp_moe_s: Arr
    mem_attn_s: Arr
    comp_attn_s: Arr
    mem_idx_s: Arr  # DeepSeek sparse-attention indexer: fp8 keys read
    comp_idx_s: Arr  # ... q·k logits at the fp8 peak
    mem_rec_s: Arr  # linear-attention / Mamba layers: state (and prefill chunk states) read and written
    comp_rec_s: Arr  # ... recurrence (decode) or chunked scan (prefill)
    kernels: Arr
    graphed: Arr  # 1.0 where the step replays a CUDA graph, else 0.0
    overlap: Arr  # 1.0 where the engine prepares the next step on the CPU while the GPU runs this one
    batch: Arr  # sequences in the step, all dp ranks
    tokens: Arr
    floor_s: Arr
    coll_latency_s: Arr  # Σ over collectives of calls × latency part
    coll_bandwidth_s: Arr  # Σ over collectives of calls × bandwidth part
    gemm_mem_ratio: Arr  # measured GEMM curve: multiplies mem_gemm_s (ratio(M) · achieved/datasheet BW); 0 = none
    gemm_comp_ratio: Arr  # ... multiplies comp_gemm_s (ratio(M)); 0 where the GPU has no curve
    moe_curve_s: Arr  # routed experts at the measured per-op curve (measured_ops.py), all MoE layers; 0 = none
    moe_curve_kernels: Arr  # kernels the MoE curve prices per step (left out of the per-kernel overhead with it)
    gemm_op_s: Arr  # dense GEMMs with a measured aiconfigurator curve (measured_ops.dense_gemm_curve); 0 = none
    mem_gemm_rest_s: Arr  # ... the listed-or-not dense GEMMs without one: weight read at achieved BW
    comp_gemm_rest_s: Arr  # ... and their FLOPs at peak
    gemm_op_kernels: Arr  # GEMM launches the curve prices per step
    attn_op_s: Arr  # decode attention kernels at the measured curve (measured_ops.decode_attention_curve); 0 = none
    mem_attn_rest_s: Arr  # ... what that curve does not read: the KV written by the step (achieved BW)
    attn_op_kernels: Arr  # attention kernels the curve prices per step
    eager_kernels: Arr  # kernels launched outside the step's CUDA graph (a verify block on the MLA prefill path)
    host_dispatch_s: Arr  # host time issuing an eager decode step's kernels one op at a time (graphs.eager_host_s)
    routing_s: Arr  # MoE routing kernels of a graphed step at their measured duration (moe_host.py); 0 = none
    colls: dict[str, CollParts]  # per collective (empty in stacked parts, see `stack_parts`)

    def take(self, n: int) -> StepParts:
        """The parts broadcast to n points (1-d arrays, ready for `stack_parts`)."""
        def b(x: Arr) -> Arr:
            return np.broadcast_to(np.asarray(x, dtype=float), (n,)).copy()

        colls = {k: CollParts(c.calls, b(c.bytes_per_call), b(c.latency_s), b(c.bandwidth_s))
                 for k, c in self.colls.items()}
        return map_parts(self, b, colls)


_ARRAY_FIELDS = ("mem_gemm_s", "comp_gemm_s", "mem_moe_s", "comp_moe_s", "mem_attn_s", "comp_attn_s", "mem_idx_s",
                 "comp_idx_s", "mem_rec_s", "comp_rec_s", "kernels", "graphed", "overlap", "batch", "tokens", "floor_s",
                 "coll_latency_s", "coll_bandwidth_s", "gemm_mem_ratio", "gemm_comp_ratio", "moe_curve_s",
                 "moe_curve_kernels", "gemm_op_s", "mem_gemm_rest_s", "comp_gemm_rest_s", "gemm_op_kernels",
                 "attn_op_s", "mem_attn_rest_s", "attn_op_kernels", "eager_kernels", "host_dispatch_s",
                 "routing_s")


def map_parts(p: StepParts, fn: Callable[[Arr], Arr], colls: dict[str, CollParts] | None = None) -> StepParts:
    """`fn` applied to every array field of `p` (a mask, a broadcast); `colls` replaces the per-collective detail."""
    return StepParts(**{f: fn(getattr(p, f)) for f in _ARRAY_FIELDS}, colls=colls or {})


def stack_parts(parts: list[StepParts]) -> StepParts:
    """Concatenate 1-d parts of many scenarios into one (per-collective detail dropped)."""
    first = parts[0]
    cols = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _ARRAY_FIELDS}
    return map_parts(first, lambda x: cols[_field_of(first, x)])


def _field_of(p: StepParts, x: Arr) -> str:
    return next(f for f in _ARRAY_FIELDS if getattr(p, f) is x)
