"""Apply efficiencies to a step's parts: the roofline per kernel class, the measured per-op curves where they price
part of a class, collectives, kernel and CPU overheads (the formulas: step.py's module docstring).

What it does not: build parts (step.py) or know about scenarios.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.step_types import Arr, StepParts


@dataclass(frozen=True)
class ClassTimes:
    """Each kernel class's memory and compute time under the efficiencies (or as a measured curve prices it), and
    the kernels the curves price (left out of the per-kernel overhead in a graph replay)."""

    m_gemm: Arr
    c_gemm: Arr
    m_moe: Arr
    c_moe: Arr
    m_attn: Arr
    c_attn: Arr
    curve_kernels: Arr | float
    moe_on: bool  # the measured routed-expert curve is switched on


def combine_step(p: StepParts, eff: Efficiency) -> dict[str, Arr]:
    """Apply efficiencies to a step's parts: {step, TERMS..., gemm, moe, attention, kernels, cpu, floor, tokens}
    plus `coll:<name>` with each collective's time (all arrays). `kernels` is the kernel overhead (launches,
    graph-replay cost, MoE routing kernels), `cpu` the host time exposed (after any overlap), `cpu_raw` before."""
    k = class_times(p, eff)
    idx = np.maximum(p.mem_idx_s / eff.attn_bw_eff, p.comp_idx_s / eff.attn_compute_eff)
    rec = np.maximum(p.mem_rec_s / eff.attn_bw_eff, p.comp_rec_s / eff.attn_compute_eff)
    lat, bws = eff.collective_latency_scale, eff.collective_bw_scale
    out = {"coll:" + name: c.latency_s * lat + c.bandwidth_s / bws for name, c in p.colls.items()}
    comm = p.coll_latency_s * lat + p.coll_bandwidth_s / bws
    kern = kernel_overhead(p, eff, k)
    cpu = host_cpu_s(eff, p.batch)
    w = np.where(k.m_gemm >= k.c_gemm, k.m_gemm, 0.0) + np.where(k.m_moe >= k.c_moe, k.m_moe, 0.0)
    kv = np.where(k.m_attn >= k.c_attn, k.m_attn, 0.0)
    comp = (np.where(k.m_gemm < k.c_gemm, k.c_gemm, 0.0) + np.where(k.m_moe < k.c_moe, k.c_moe, 0.0)
            + np.where(k.m_attn < k.c_attn, k.c_attn, 0.0))
    gpu = w + kv + comp + comm + kern + idx + rec
    eager = eager_launches(p, eff, gpu)
    kern, gpu = kern + eager, gpu + eager
    cpu_raw = cpu
    cpu = exposed_host_s(cpu, gpu, p.overlap > 0.5, eff.overlap_exposed_frac)
    over = kern + cpu
    out.update({
        "step": gpu + cpu, "weights": w, "kv": kv, "compute": comp,
        "communication": comm, "overhead": over, "indexer": idx, "recurrent": rec,
        "gemm": np.maximum(k.m_gemm, k.c_gemm), "moe": np.maximum(k.m_moe, k.c_moe),
        "attention": np.maximum(k.m_attn, k.c_attn) + idx + rec, "kernels": kern, "cpu": cpu, "cpu_raw": cpu_raw,
        "floor": p.floor_s, "tokens": p.tokens,
        # what a prefill adds when it rides in a decode step (serving.py interference): its GEMM and expert FLOPs,
        # its attention, and the bandwidth part of its collectives; the weights and the collectives' latency are the
        # decode step's already
        "marginal:compute": k.c_gemm + k.c_moe + np.where(k.m_attn < k.c_attn, k.c_attn, 0.0),
        "marginal:kv": kv, "marginal:communication": p.coll_bandwidth_s / bws,
    })
    return out


def host_cpu_s(eff: Efficiency, batch: Any) -> Any:
    """Host (CPU) seconds of one engine step of `batch` sequences (all dp ranks): cpu_overhead_s +
    cpu_overhead_per_seq_s · batch (scheduler, sampling, detokenise; fitted: specs/data/efficiency.toml). The one
    scheduling cost between steps, charged by the closed form here and by the simulation (simulate/stepcost.py)."""
    return eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * batch


def exposed_host_s(cpu: Any, gpu: Any, overlap: Any, exposed_frac: float) -> Arr:
    """The seconds of host time `cpu` a step adds to its GPU time `gpu`: all of it, or, where the engine prepares
    the next step on the CPU while the GPU runs this one (`overlap`: Scenario.overlaps_cpu, the engine record's
    overlap.enabled), the exposed share f · cpu plus what of the rest the GPU step is too short to hide:
    f·cpu + max((1 − f)·cpu − gpu, 0), f = exposed_frac (overlap_exposed_frac, fitted). Shared with
    simulate/stepcost.py."""
    exposed = exposed_frac * cpu
    out: Arr = np.where(overlap, exposed + np.maximum(cpu - exposed - gpu, 0.0), cpu)
    return out


def class_times(p: StepParts, eff: Efficiency) -> ClassTimes:
    """t_c = max(memory_c / bw_eff_c, compute_c / compute_eff_c) per class c ∈ {gemm, moe, attention}, its memory
    and compute parts kept apart; a measured GEMM ratio (no fitted efficiency on top), expert curve or per-op
    curve replaces the part it prices."""
    m_gemm, c_gemm = p.mem_gemm_s / eff.gemm_bw_eff, p.comp_gemm_s / eff.compute_eff
    if eff.gemm_curve > 0.5 and np.any(p.gemm_comp_ratio > 0):  # measured curve: no fitted efficiency on top
        has = p.gemm_comp_ratio > 0
        m_gemm = np.where(has, p.mem_gemm_s * p.gemm_mem_ratio, m_gemm)
        c_gemm = np.where(has, p.comp_gemm_s * p.gemm_comp_ratio, c_gemm)
    m_moe, c_moe = p.mem_moe_s / eff.moe_bw_eff, p.comp_moe_s / eff.moe_compute_eff
    # the routed-expert curve: on where its domain allows (measured_ops; curve_bounds.DOMAIN_OFF) unless moe_curve
    # or the per-op curves as a whole (--op-curves off, the fit's roofline stage) are off
    moe_on = bool(eff.moe_curve > 0.5 and eff.op_curves > 0.5)
    if moe_on and np.any(p.moe_curve_s > 0):  # measured expert curve: as measured, the roofline
        has, mem_bound = p.moe_curve_s > 0, m_moe >= c_moe  # only says which term it is attributed to
        m_moe = np.where(has, np.where(mem_bound, p.moe_curve_s, 0.0), m_moe)
        c_moe = np.where(has, np.where(mem_bound, 0.0, p.moe_curve_s), c_moe)
    m_attn, c_attn = p.mem_attn_s / eff.attn_bw_eff, p.comp_attn_s / eff.attn_compute_eff
    curve_kernels = p.moe_curve_kernels if moe_on else 0.0
    if eff.op_curves > 0.5:
        m_gemm, c_gemm = _measured_gemm(p, eff, m_gemm, c_gemm)
        m_attn, c_attn = _measured_attention(p, eff, m_attn, c_attn)
        curve_kernels = curve_kernels + p.gemm_op_kernels + p.attn_op_kernels
    return ClassTimes(m_gemm, c_gemm, m_moe, c_moe, m_attn, c_attn, curve_kernels, moe_on)


def kernel_overhead(p: StepParts, eff: Efficiency, k: ClassTimes) -> Arr:
    """kernels · (kernel_overhead_s in a CUDA graph | launch_overhead_s eager), less the kernels a measured curve
    prices in a graph replay, + the MoE routing kernels at their measured floor (moe_host.py) unless the measured
    MoE curve prices the layer."""
    per_kernel = np.where(p.graphed > 0.5, eff.kernel_overhead_s, eff.launch_overhead_s)
    # in a graph replay a measured curve's kernels carry their own cost; eager launches still cost the CPU each
    kern = np.maximum(p.kernels - np.where(p.graphed > 0.5, k.curve_kernels, 0.0), 0.0) * per_kernel
    out: Arr = kern + np.where(k.moe_on & (p.moe_curve_s > 0), 0.0, p.routing_s)
    return out


def eager_launches(p: StepParts, eff: Efficiency, gpu: Arr) -> Arr:
    """max(host launch time − the step's GPU time, 0): the host time is eager kernels · (launch_overhead_s −
    kernel_overhead_s) in a graphed step, the eager decode step's dispatch (graphs.eager_host_s) in an eager one; the
    step then takes max(GPU, host)."""
    # kernels a graphed step still launches eagerly between its graph pieces (a verify block on the MLA prefill
    # path), or every kernel of an eager decode step: their launches' CPU time runs while the GPU works through the
    # kernels already issued, so only what exceeds the step's GPU time is exposed
    eager = p.eager_kernels * np.where(p.graphed > 0.5,
                                       np.maximum(eff.launch_overhead_s - eff.kernel_overhead_s, 0.0), 0.0)
    out: Arr = np.maximum(eager + p.host_dispatch_s - gpu, 0.0)
    return out


def _measured_gemm(p: StepParts, eff: Efficiency, m_gemm: Arr, c_gemm: Arr) -> tuple[Arr, Arr]:
    """Dense GEMMs where a measured curve covers some: curve + the rest's roofline / fitted efficiency, attributed
    whole to `weights` or `compute` as the datasheet roofline of all of them says."""
    has = p.gemm_op_s > 0
    if not np.any(has):
        return m_gemm, c_gemm
    total = p.gemm_op_s + np.maximum(p.mem_gemm_rest_s / eff.gemm_bw_eff, p.comp_gemm_rest_s / eff.compute_eff)
    mem_bound = p.mem_gemm_s >= p.comp_gemm_s
    return (np.where(has, np.where(mem_bound, total, 0.0), m_gemm),
            np.where(has, np.where(mem_bound, 0.0, total), c_gemm))


def _measured_attention(p: StepParts, eff: Efficiency, m_attn: Arr, c_attn: Arr) -> tuple[Arr, Arr]:
    """Decode attention where a measured curve covers it: max(curve + the KV write at the fitted bandwidth, the
    attention FLOPs at the fitted compute efficiency), attributed to `kv` or `compute` as before."""
    has = p.attn_op_s > 0
    if not np.any(has):
        return m_attn, c_attn
    total = np.maximum(p.attn_op_s + p.mem_attn_rest_s / eff.attn_bw_eff, c_attn)
    mem_bound = m_attn >= c_attn
    return (np.where(has, np.where(mem_bound, total, 0.0), m_attn),
            np.where(has, np.where(mem_bound, 0.0, total), c_attn))
