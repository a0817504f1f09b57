"""Communication tracks: `custom_allreduce`, `nccl_tuning`, `collective_fusion`, `expert_parallel`.

Does: decide whether each applies on this system and engine (the vLLM rules in hardware-and-models.md §2c),
and express it as a what-if:
  custom_allreduce   every all-reduce call below vLLM's 8 MiB limit costs
                     min(current, one-shot, two-shot) with
                     one-shot  t = floor + (n−1)·bytes / bw_in      (each rank reads every peer's buffer)
                     two-shot  t = 2·floor + 2(n−1)/n · bytes / bw_in (reduce-scatter + all-gather)
                     PCIe: floor by GPU count (2: 4.1 µs AIC-COMM vLLM graph AR; 4: 6.1 µs, 8: 7.5 µs
                     R6K-ONESHOT), bw_in 28 GB/s (DERIVED: R6K-ONESHOT 8 GPUs, 256 KB in 73.6 µs);
                     NVLink: floor 4.6 µs (AIC-COMM H100 custom AR, 1 KB), bw_in 0.78 × NVLink per direction
                     (DERIVED: AIC-COMM H100 custom AR 16 MB in 92.4 µs).
  nccl_tuning        collective bus bandwidth ×(tuned / measured-default) and the latency floor back to the
                     measured floor when calibration found it inflated (R6K-NCCL; NVIDIA/nccl-tests#212).
  collective_fusion  fused all-reduce + residual-add + RMSNorm: one norm kernel (and its launch) fewer per
                     all-reduce (FlashInfer fusion, SM90/SM100 only: local-inference-lab/vllm#261).
  expert_parallel    the perfmodel prices EP (all-to-all dispatch + combine) directly; two layouts are tried:
                     EP with TP attention, and EP with attention data parallelism.
Does not: model NVLS/multicast or symmetric-memory all-reduce separately (they fall under the NVLink floor).
"""

from __future__ import annotations

import math
from typing import Any

from servescope.errors import ServescopeError
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.whatif import Collective, StepView, WhatIf
from servescope.units import GIGA

VLLM_CUSTOM_AR_MAX_BYTES = 8192 * 1024  # VLLM-CAR max_size
VLLM_CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)  # VLLM-CAR
PCIE_ONESHOT_FLOOR_S = {2: 4.1e-6, 4: 6.1e-6, 8: 7.5e-6}  # AIC-COMM (2 GPUs); R6K-ONESHOT (4, 8 GPUs)
PCIE_ONESHOT_BW = 28.0 * GIGA  # DERIVED from R6K-ONESHOT: 7 × 256 KiB / (73.6 − 7.5) µs
NVLINK_CUSTOM_AR_FLOOR_S = 4.6e-6  # AIC-COMM H100 SXM vLLM custom AR at 1 KB
NVLINK_CUSTOM_AR_BW_FRACTION = 0.78  # DERIVED: AIC-COMM H100 custom AR 16 MB = 92.4 µs two-shot at 450 GB/s
PCIE_TUNED_BUSBW = 41.1 * GIGA  # R6K-NCCL: 8 GPUs, 3 PCIe switches, NCCL_MIN_NCHANNELS=8
PCIE_DEFAULT_BUSBW = 23.8 * GIGA  # hardware-and-models.md §2b: AIC-COMM nccl-tests 64 MiB all_reduce
NVLS_OVER_RING = 480.0 / 370.0  # NVIDIA/nccl-tests#212: 8x H100 NVLS ~480 GB/s vs ring ~370 effective
FUSION_ARCHS = ("sm_90", "sm_100", "sm_103")  # FlashInfer all-reduce fusion (local-inference-lab/vllm#261)


def custom_ar_call_s(message_bytes: float, n_gpus: int, link: str, nvlink_bw: float) -> float:
    """One custom all-reduce call (seconds): the better of one-shot and two-shot (see module docstring)."""
    if link == "pcie":
        floor = next((PCIE_ONESHOT_FLOOR_S[n] for n in sorted(PCIE_ONESHOT_FLOOR_S) if n >= n_gpus), 7.5e-6)
        bw = PCIE_ONESHOT_BW
    else:
        floor, bw = NVLINK_CUSTOM_AR_FLOOR_S, NVLINK_CUSTOM_AR_BW_FRACTION * nvlink_bw
    one = floor + (n_gpus - 1) * message_bytes / bw
    two = 2 * floor + 2 * (n_gpus - 1) / n_gpus * message_bytes / bw
    return min(one, two)


def _curves(ctx: Context) -> Any:
    from servescope.perfmodel.hw import load_curves

    sc = ctx.scenario
    return load_curves(sc.gpu, int(sc.tp), sc.interconnect)


def _ar_calls(ctx: Context) -> float:
    coll = ctx.baseline.step.collectives.get("all_reduce")
    return coll.calls_per_step if coll else 0.0


def custom_allreduce_track(ctx: Context) -> Proposal:
    kind, sc, link = "custom_allreduce", ctx.scenario, ctx.link
    validate = ("trace one decode step (servescope trace) and compare all-reduce µs per call; vLLM: A/B with "
                "--disable-custom-all-reduce; on PCIe the engine must allow it (VLLM_ENABLE_PCIE_ALLREDUCE=1)")
    if sc.tp == 1 or _ar_calls(ctx) == 0:
        return not_applicable(kind, "TP=1: no all-reduce to replace", "config change", validate)
    if sc.tp not in VLLM_CUSTOM_AR_WORLD_SIZES:
        return not_applicable(kind, f"vLLM's custom all-reduce supports TP 2, 4, 6, 8, not {sc.tp}",
                              "engine upgrade", validate)
    if link == "pcie" and not bool(sc.gpu.p2p):
        return not_applicable(kind, f"{sc.gpu.name} has no GPU peer-to-peer access over PCIe; custom "
                              "all-reduce needs P2P (vLLM gpu_p2p_access_check)", "new kernel", validate)
    if bool(getattr(_curves(ctx), "custom_allreduce_available", False)):
        return not_applicable(kind, "already in use: vLLM enables its custom all-reduce on this system "
                              f"({'NVLink' if link == 'nvlink' else '2 PCIe GPUs'})", "config change", validate)
    effort = "engine upgrade" if link == "pcie" else "config change"
    pre = ("GPU peer-to-peer access (P2P) between all TP ranks",)
    note = ""
    if link == "pcie":
        pre += ("an engine build that allows one-shot all-reduce on >2 PCIe GPUs (vLLM disables it: 'not "
                "supported on more than two PCIe-only GPUs'); e.g. local-inference-lab/vllm#261 "
                "VLLM_ENABLE_PCIE_ALLREDUCE=1, VLLM_PCIE_ALLREDUCE_BACKEND=cpp",)
        note = "vLLM upstream vetoes custom all-reduce on more than two PCIe-only GPUs"
    nvl = float(sc.gpu.nvlink_bw_bytes_per_s or 0.0)
    n = int(sc.tp)

    def adjust(_sc: Any, view: StepView) -> StepView:
        old = view.collectives.get("all_reduce")
        if old is None or old.calls_per_step == 0 or old.bytes_per_call >= VLLM_CUSTOM_AR_MAX_BYTES:
            return view
        per_call = min(old.time_s / old.calls_per_step, custom_ar_call_s(old.bytes_per_call, n, link, nvl))
        return view.with_collective("all_reduce", Collective(old.calls_per_step, old.bytes_per_call,
                                                             per_call * old.calls_per_step))

    return Proposal(kind, True, None, effort, pre, validate, whatif=WhatIf(kind, adjust=adjust), note=note)


def nccl_tuning_track(ctx: Context) -> Proposal:
    kind, sc, link = "nccl_tuning", ctx.scenario, ctx.link
    if not ctx.baseline.step.collectives or ctx.n_gpus == 1:
        return not_applicable(kind, "single GPU: no collectives", "config change")
    eff = sc.efficiency
    curves = _curves(ctx)
    base_bw = float(getattr(curves, "busbw", 0.0) or 0.0) or _curve_busbw(curves) or PCIE_DEFAULT_BUSBW
    if link == "pcie":
        bw_scale = max(eff.collective_bw_scale, PCIE_TUNED_BUSBW / base_bw)
        source = "R6K-NCCL: 41.1 GB/s all-reduce busbw on 8 PCIe GPUs (3 switches, NCCL_MIN_NCHANNELS=8)"
        env = "NCCL_MIN_NCHANNELS=8, NCCL_PROTO=LL for small messages, NCCL_TOPO_FILE=<xml> on dual-socket hosts"
    else:
        bw_scale = max(eff.collective_bw_scale, NVLS_OVER_RING)
        source = "NVIDIA/nccl-tests#212: NVLS ~480 GB/s vs ring ~370 GB/s on 8x H100"
        env = "NCCL_NVLS_ENABLE=1 (NVSwitch systems), NCCL_ALGO=NVLS,Ring"
    lat_scale = min(eff.collective_latency_scale, 1.0)
    if bw_scale <= eff.collective_bw_scale * 1.001 and lat_scale >= eff.collective_latency_scale:
        return not_applicable(kind, "collectives already at the tuned bus bandwidth and latency floor",
                              "config change")

    def change(s: Any) -> Any:
        e = s.efficiency.scaled(collective_bw_scale=bw_scale, collective_latency_scale=lat_scale)
        return s.with_(efficiency=e)

    validate = f"nccl-tests all_reduce_perf -b 8 -e 512M on the TP group before/after; set {env}"
    pre = (f"bus bandwidth reachable on this topology ({source})",)
    note = ("latency-bound small messages gain little; the floor (≈24 µs on 8 PCIe GPUs) stays"
            if link == "pcie" else "")
    return Proposal(kind, True, None, "config change", pre, validate, whatif=WhatIf(kind, scenario=change),
                    note=note, details={"bw_scale": bw_scale, "latency_scale": lat_scale, "source": source})


def _curve_busbw(curves: Any) -> float:
    for attr in ("bus_bw_bytes_per_s", "busbw_bytes_per_s"):
        value = getattr(curves, attr, None)
        if isinstance(value, dict):
            value = value.get("all_reduce")
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return 0.0


def collective_fusion_track(ctx: Context) -> Proposal:
    kind, sc = "collective_fusion", ctx.scenario
    validate = ("vLLM -O '{\"pass_config\": {\"enable_fi_allreduce_fusion\": true}}' (compilation config); check "
                "in a trace that rms_norm kernels disappear next to the all-reduce (allreduce_fusion_kernel)")
    if sc.tp == 1 or _ar_calls(ctx) == 0:
        return not_applicable(kind, "TP=1: no all-reduce to fuse", "config change", validate)
    arch = str(sc.gpu.compute_capability)
    if arch not in FUSION_ARCHS:
        return not_applicable(kind, f"FlashInfer all-reduce+RMSNorm fusion runs on SM90/SM100 only, this GPU is "
                              f"{arch} (local-inference-lab/vllm#261)", "new kernel", validate)
    if ctx.link == "pcie":
        return not_applicable(kind, "the fused all-reduce kernels need NVLink peer memory; this system is PCIe",
                              "new kernel", validate)
    if not sc.cuda_graphs:
        return not_applicable(kind, "the fusion pass needs torch.compile with CUDA graphs (enforce-eager is on)",
                              "config change", validate)
    calls = _ar_calls(ctx)
    norm_call_s = _measured_norm_call_s(ctx)

    def adjust(s: Any, view: StepView) -> StepView:
        ar = view.collectives.get("all_reduce")
        if ar is None or ar.calls_per_step == 0:
            return view
        # one norm kernel per all-reduce goes away: its launch gap (model) and its runtime (measured, if any)
        per_call = s.efficiency.kernel_overhead_s + norm_call_s
        return view.shifted("overhead", -per_call * ar.calls_per_step, cls="norm")

    pre = ("vLLM with FlashInfer all-reduce fusion", "torch.compile + CUDA graphs")
    return Proposal(kind, True, None, "config change", pre, validate, whatif=WhatIf(kind, adjust=adjust),
                    details={"all_reduce_calls": calls})


def _measured_norm_call_s(ctx: Context) -> float:
    """Median runtime of one norm kernel in the calibration trace (0 without one: the model has no norm time)."""
    cal = ctx.calibration
    per_call = getattr(cal, "class_per_call_s", None) or {}
    return float(per_call.get("norm", 0.0))


def expert_parallel_track(ctx: Context) -> Proposal:
    kind, sc = "expert_parallel", ctx.scenario
    validate = ("vLLM --enable-expert-parallel (with --data-parallel-size N for attention-DP); compare TPOT at the "
                "planned concurrency and the all-to-all µs per call in a trace")
    if not sc.model.is_moe:
        return not_applicable(kind, f"{sc.model.name} is dense: no experts to distribute", "config change", validate)
    n = int(sc.tp) * int(sc.dp)
    if n == 1:
        return not_applicable(kind, "one GPU: nothing to distribute experts over", "config change", validate)
    if sc.ep == n:
        return not_applicable(kind, f"already expert-parallel (EP={sc.ep})", "config change", validate)
    layouts = {"EP with TP attention": {"ep": n}, "EP with attention data parallel": {"tp": 1, "dp": n, "ep": n}}
    options: list[tuple[float, str, WhatIf]] = []
    for name, changes in layouts.items():
        whatif = WhatIf(kind, scenario=_with(changes), exclusive=("parallelism_change",))
        try:
            gain = ctx.evaluator.gain(ctx.baseline, ctx.evaluator.objective_value((whatif,)))
        except ServescopeError:
            continue
        options.append((gain, name, whatif))
    if not options:
        return not_applicable(kind, f"no expert-parallel layout of {n} GPUs fits {sc.model.name}",
                              "config change", validate)
    gain, name, whatif = max(options, key=lambda o: o[0])
    why = None if gain > 1.0 else _why_ep_does_not_pay(ctx, options)
    pre = (f"{sc.model.n_routed_experts} experts divisible by EP={n}",
           "expert load balanced across GPUs (EPLB) at high concurrency")
    return Proposal(kind, True, why, "config change", pre, validate, whatif=whatif, note=name,
                    details={"layout": name, "options": {o[1]: o[0] for o in options}})


def _why_ep_does_not_pay(ctx: Context, options: list[tuple[float, str, WhatIf]]) -> str:
    """Plain words from the numbers: what each EP layout adds and saves at this batch on this link."""
    link = "PCIe" if ctx.link == "pcie" else "NVLink"
    base = ctx.baseline.step
    ar = base.collectives.get("all_reduce")
    parts = []
    for _gain, name, whatif in options:
        new = ctx.evaluator.at((whatif,), ctx.concurrency).step
        a2a = new.collectives.get("all_to_all")
        if a2a is not None and a2a.calls_per_step:
            per_call_us = a2a.time_s / a2a.calls_per_step * 1e6
            text = (f"{name} swaps the all-reduces ({_ms(ar.time_s if ar else 0.0)}) for {a2a.calls_per_step:.0f} "
                    f"{link} all-to-all calls (dispatch + combine, {per_call_us:.0f} µs each on "
                    f"{a2a.bytes_per_call / 1e3:.0f} KB messages: latency-bound at batch {ctx.concurrency})")
            weights_old, weights_new = base.terms_s.get("weights", 0.0), new.terms_s.get("weights", 0.0)
            if weights_new > weights_old * 1.05:
                text += (f", but each request's attention then runs on one GPU that reads its weights alone "
                         f"({_ms(weights_old)} → {_ms(weights_new)} of weight reads)")
        else:
            moe_old, moe_new = base.class_time_s.get("moe", 0.0), new.class_time_s.get("moe", 0.0)
            text = (f"{name} keeps every all-reduce and holds whole experts per GPU, so the busiest GPU's "
                    f"experts take {_ms(moe_new)} instead of {_ms(moe_old)} (load imbalance at small batch)")
        parts.append(text)
    return f"does not pay at batch {ctx.concurrency} over {link}: " + "; ".join(parts)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _with(changes: dict[str, int]) -> Any:
    def change(s: Any) -> Any:
        return s.with_(**changes)

    return change


def expert_imbalance(n_experts: int, top_k: int, ep: int, tokens: int) -> float:
    """Busiest GPU's routed-expert reads over the mean, for whole experts placed on `ep` GPUs.

    Each GPU holds n = E/ep experts; an expert is activated by a step of T tokens with q = 1 − (1 − k/E)^T
    (uniform routing, as the perfmodel assumes); activated experts per GPU X ~ Binomial(n, q), GPUs treated as
    independent: E[max X] = Σ_{m≥0} (1 − F(m)^ep). Returns E[max X] / (n·q) (1.0 when every expert is hot).
    Routing skew (hot experts) is not modelled: EPLB is assumed to remove it.
    """
    if ep <= 1 or n_experts <= 0 or top_k <= 0:
        return 1.0
    n = n_experts // ep
    q = 1.0 - (1.0 - top_k / n_experts) ** max(tokens, 1)
    if q >= 1.0 - 1e-12:
        return 1.0
    pmf = [math.comb(n, m) * q**m * (1.0 - q) ** (n - m) for m in range(n + 1)]
    cdf, expected_max = 0.0, 0.0
    for m in range(n):
        cdf += pmf[m]
        expected_max += 1.0 - min(cdf, 1.0) ** ep
    return max(1.0, expected_max / (n * q))


def imbalance_adjust(sc: Any, view: StepView) -> StepView:
    """Scale the routed-expert time by the load imbalance of whole experts per GPU (EP only)."""
    moe = view.class_time_s.get("moe", 0.0)
    if sc.ep <= 1 or moe <= 0:
        return view
    imb = expert_imbalance(sc.model.n_routed_experts, sc.model.top_k, sc.ep, view.tokens)
    term = "weights" if view.terms_s.get("weights", 0.0) >= moe else "compute"
    return view.shifted(term, moe * (imb - 1.0), cls="moe")
