"""Communication tracks: `custom_allreduce`, `nccl_tuning`, `collective_fusion` (and `expert_parallel`, which lives
in planner.tracks_ep with the experts' load imbalance and is re-exported here).

Does: decide whether each applies on this system and engine (the vLLM rules in hardware-and-models.md §2c),
and express it as a what-if:
  custom_allreduce   the engine's gates first (planner.allreduce_paths: vLLM turns custom all-reduce off on > 2
                     PCIe-only GPUs; a build that lifts it is named `--engine-version X+pcie-ar`), then every
                     all-reduce call is priced on the path the engine's rule gives it (one-shot, two-shot or NCCL
                     by message size; no min() with the current path: the engine does not pick per message):
                     PCIe: the measured one-shot curve (R6K-ONESHOT) inside its message range where no topology
                     was named, else current call × (custom / NCCL ring) on the box's PCIe topology (switch
                     uplinks, sockets: specs.pcie_topology; default preset switch-2x4), which can exceed 1 — a
                     loss. NVLink: one-shot/two-shot formula (allreduce_paths.NvlinkFormula).
                     `custom_ar_call_s` keeps the topology-free PCIe formula (the better of
                     one-shot  t = floor + (n−1)·bytes / bw_in and two-shot t = 2·floor + 2(n−1)/n · bytes / bw_in,
                     bw_in 28 GB/s DERIVED from R6K-ONESHOT: 8 GPUs, 256 KB in 73.6 µs).
                     details `all_reduce_ratio` = new / old per call at the step's message size; the TPOT gain is
                     1 / (1 − s · (1 − ratio)) at all-reduce share s of the step.
  nccl_tuning        all-reduce on the measured tuned-NCCL curve (`nccl_tuned`, R6K-NCCL) where it exists, else
                     bus bandwidth ×(tuned / default) (R6K-NCCL; NVIDIA/nccl-tests#212 for NVLS); and the
                     latency floor back to the measured floor when calibration found it inflated.
  collective_fusion  fused all-reduce + residual-add + RMSNorm: one norm kernel (and its launch) fewer per
                     all-reduce (FlashInfer fusion, SM90/SM100 only: local-inference-lab/vllm#261).
Does not: model NVLS/multicast or symmetric-memory all-reduce separately (they fall under the NVLink floor).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servescope.perfmodel.scenario import Scenario
from servescope.planner.allreduce_paths import (
    NVLINK_CUSTOM_AR_BW_FRACTION,
    NVLINK_CUSTOM_AR_FLOOR_S,
    OWN_ALLREDUCE_BACKEND,
    PATCHED_HOW,
    PCIE_ONESHOT_FLOOR_S,
    SYMM_MEM_CAPABILITIES,
    SYMM_MEM_NOTE,
    VLLM_CUSTOM_AR_WORLD_SIZES,
    VLLM_PCIE_GATE,
    EngineAllReduce,
    MeasuredOneShot,
    NvlinkFormula,
    TopologyAllReduce,
    engine_path,
    patched_rule,
)
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.tracks_ep import expert_imbalance, expert_parallel_track
from servescope.planner.whatif import Adjust, Change, Collective, StepView, WhatIf
from servescope.specs.collectives import CollectiveCurves, load_collectives
from servescope.specs.pcie_topology import PcieTopology, default_topology_name, load_pcie_topology
from servescope.units import GIGA

# expert_parallel_track and expert_imbalance are planner.tracks_ep's, re-exported
__all__ = ["collective_fusion_track", "custom_ar_call_s", "custom_allreduce_track", "expert_imbalance",
           "expert_parallel_track", "nccl_tuning_track"]

PCIE_ONESHOT_BW = 28.0 * GIGA  # DERIVED from R6K-ONESHOT: 7 × 256 KiB / (73.6 − 7.5) µs
PCIE_TUNED_BUSBW = 41.1 * GIGA  # R6K-NCCL: 8 GPUs, 3 PCIe switches, NCCL_MIN_NCHANNELS=8
PCIE_DEFAULT_BUSBW = 23.8 * GIGA  # hardware-and-models.md §2b: AIC-COMM nccl-tests 64 MiB all_reduce
NVLS_OVER_RING = 480.0 / 370.0  # NVIDIA/nccl-tests#212: 8x H100 NVLS ~480 GB/s vs ring ~370 effective
FUSION_ARCHS = ("sm_90", "sm_100", "sm_103")  # FlashInfer all-reduce fusion (local-inference-lab/vllm#261)


def custom_ar_call_s(message_bytes: float, n_gpus: int, link: str, nvlink_bw: float) -> float:
    """One custom all-reduce call (seconds): the better of one-shot and two-shot (see module docstring)."""
    if link != "nvlink":  # pcie_p2p (the one-shot path needs P2P; pcie_no_p2p is refused before pricing)
        floor = next((PCIE_ONESHOT_FLOOR_S[n] for n in sorted(PCIE_ONESHOT_FLOOR_S) if n >= n_gpus), 7.5e-6)
        bw = PCIE_ONESHOT_BW
    else:
        floor, bw = NVLINK_CUSTOM_AR_FLOOR_S, NVLINK_CUSTOM_AR_BW_FRACTION * nvlink_bw
    one = floor + (n_gpus - 1) * message_bytes / bw
    two = 2 * floor + 2 * (n_gpus - 1) / n_gpus * message_bytes / bw
    return min(one, two)


def _curves(ctx: Context) -> CollectiveCurves:
    sc = ctx.scenario
    return load_collectives(sc.gpu, int(sc.tp), sc.interconnect)


def _ar_calls(ctx: Context) -> float:
    coll = ctx.baseline.step.collectives.get("all_reduce")
    return coll.calls_per_step if coll else 0.0


@dataclass(frozen=True, eq=False)
class MeasuredAllReduce:
    """One all-reduce call on a measured alternative path of these curves (specs.collectives: min(that, NCCL)):
    message bytes -> (latency floor s, time s)."""

    curves: CollectiveCurves
    backend: str

    def __call__(self, nbytes: float) -> tuple[float, float]:
        from servescope.specs.collectives import collective_time_s

        t = float(collective_time_s(self.curves, "all_reduce", nbytes, backend=self.backend))
        return min(float(self.curves.alternatives[self.backend].latency_floor_s), t), t


CallCost = MeasuredAllReduce


def _alternative_call_s(curves: CollectiveCurves, backend: str) -> MeasuredAllReduce | None:
    """A measured alternative all-reduce path, if the system has one."""
    return MeasuredAllReduce(curves, backend) if backend in curves.alternatives else None


@dataclass(frozen=True)
class AllReducePath:
    """Step adjustment: every all-reduce call below `max_bytes` costs min(current, `call`'s path), the path scaled
    like the perfmodel scales curves: floor · latency_scale + (t − floor) / bw_scale (in-situ rank skew stays)."""

    call: CallCost
    max_bytes: float

    def __call__(self, sc: Scenario, view: StepView) -> StepView:
        old = view.collectives.get("all_reduce")
        if old is None or old.calls_per_step == 0 or old.bytes_per_call >= self.max_bytes:
            return view
        eff = sc.efficiency
        floor, t = self.call(old.bytes_per_call)
        new = floor * eff.collective_latency_scale + max(t - floor, 0.0) / eff.collective_bw_scale
        per_call = min(old.time_s / old.calls_per_step, new)
        return view.with_collective("all_reduce", Collective(old.calls_per_step, old.bytes_per_call,
                                                             per_call * old.calls_per_step))


@dataclass(frozen=True)
class NormFusion:
    """Step adjustment: one norm kernel per all-reduce goes away — its launch gap (the model's kernel overhead) and
    its runtime (`norm_call_s`, measured in a trace, else 0)."""

    norm_call_s: float

    def __call__(self, sc: Scenario, view: StepView) -> StepView:
        ar = view.collectives.get("all_reduce")
        if ar is None or ar.calls_per_step == 0:
            return view
        per_call = sc.efficiency.kernel_overhead_s + self.norm_call_s
        return view.shifted("overhead", -per_call * ar.calls_per_step, cls="kernel_overhead")


def custom_allreduce_track(ctx: Context) -> Proposal:
    kind, sc, link = "custom_allreduce", ctx.scenario, ctx.link
    validate = ("trace one decode step (servescope trace) and compare all-reduce µs per call; vLLM: A/B with "
                "--disable-custom-all-reduce; on PCIe the engine must allow it (VLLM_ENABLE_PCIE_ALLREDUCE=1)")
    if sc.tp == 1 or _ar_calls(ctx) == 0:
        return not_applicable(kind, "TP=1: no all-reduce to replace", "config change", validate)
    if sc.tp not in VLLM_CUSTOM_AR_WORLD_SIZES:
        return not_applicable(kind, f"vLLM's custom all-reduce supports TP 2, 4, 6, 8, not {sc.tp}",
                              "engine upgrade", validate)
    if link == "pcie_no_p2p":
        return not_applicable(kind, f"{sc.gpu.name} has no GPU peer-to-peer access over PCIe; custom "
                              "all-reduce needs P2P (vLLM gpu_p2p_access_check)", "new kernel", validate)
    curves, topo = _curves(ctx), _topology(ctx)
    if curves.custom_allreduce_available or (topo is not None and topo.fully_nvlinked()):
        return not_applicable(kind, "already in use: vLLM enables its custom all-reduce on this system "
                              f"({'2 PCIe GPUs' if ctx.pcie and sc.tp == 2 else 'NVLink'})", "config change",
                              validate)
    rule = patched_rule(sc.engine_build)
    if ctx.pcie and sc.tp > 2 and sc.backend != OWN_ALLREDUCE_BACKEND and rule is None:
        symm = "" if str(sc.gpu.compute_capability) in SYMM_MEM_CAPABILITIES else f"; {SYMM_MEM_NOTE}"
        return not_applicable(kind, f"{VLLM_PCIE_GATE}{symm}. {PATCHED_HOW}", "engine upgrade", validate)
    adjust, source = _engine_adjust(ctx, rule or "vllm", topo)
    effort = "engine upgrade" if ctx.pcie else "config change"
    pre: tuple[str, ...] = ("GPU peer-to-peer access (P2P) between all TP ranks",)
    note = curves.custom_allreduce_reason
    if ctx.pcie and sc.tp > 2 and rule is not None:
        note = f"{note + ' — ' if note else ''}lifted by this engine build (+{sc.engine_build})"
    if ctx.pcie:
        pre += (f"an engine build that allows custom all-reduce on >2 PCIe GPUs (this one: +{sc.engine_build}; "
                "stock vLLM disables it: 'not supported on more than two PCIe-only GPUs'); e.g. "
                "local-inference-lab/vllm#261 VLLM_ENABLE_PCIE_ALLREDUCE=1",)
    old = ctx.baseline.step.collectives["all_reduce"]
    old_call = old.time_s / old.calls_per_step
    new_call, how = adjust.per_call_s(sc, old_call, old.bytes_per_call)
    path = engine_path(adjust.rule, adjust.n_gpus, old.bytes_per_call)
    priced = f"priced with {source}; at {old.bytes_per_call / 1024:.0f} KiB per call the engine runs {how}"
    return Proposal(kind, True, None, effort, pre, validate, whatif=WhatIf(kind, adjust=adjust),
                    note=f"{note}; {priced}" if note else priced,
                    details={"source": source, "path": path,
                             "all_reduce_ratio": new_call / old_call if old_call > 0 else 1.0,
                             "pcie_topology": topo.describe() if topo is not None else None})


def _topology(ctx: Context) -> PcieTopology | None:
    """The TP group's PCIe topology: the scenario's, else the default preset (None on NVLink)."""
    sc = ctx.scenario
    if not ctx.pcie:
        return None
    box = sc.pcie_topology or load_pcie_topology(default_topology_name())
    return box.group(int(sc.tp)) if box.n_gpus >= sc.tp else None


def _engine_adjust(ctx: Context, rule: str, topo: PcieTopology | None) -> tuple[EngineAllReduce, str]:
    """The step adjustment pricing the engine's path per call, and what prices it (module docstring)."""
    sc, n = ctx.scenario, int(ctx.scenario.tp)
    if not ctx.pcie or topo is None:
        return (EngineAllReduce(rule, n, nvlink=NvlinkFormula(n, float(sc.gpu.nvlink_bw_bytes_per_s or 0.0))),
                "the NVLink one-shot/two-shot formula (planner.allreduce_paths)")
    curves = _curves(ctx)
    nccl = curves.curves.get("all_reduce")
    floor = float(nccl.latency_floor_s) if nccl is not None else 0.0
    physics = TopologyAllReduce(topo, float(sc.gpu.pcie_bw_bytes_per_s), floor)
    alt = curves.alternatives.get("pcie_oneshot")
    measured = (MeasuredOneShot(alt) if alt is not None and alt.n_gpus == n and sc.pcie_topology is None
                else None)
    named = "" if sc.pcie_topology is not None else ", the default (no --pcie-topology named)"
    source = (f"the PCIe links of {topo.describe()}{named}: custom over NCCL ring (planner.allreduce_paths)"
              + ("; the measured one-shot curve (R6K-ONESHOT) inside its range" if measured else ""))
    return EngineAllReduce(rule, n, physics, measured), source


def nccl_tuning_track(ctx: Context) -> Proposal:
    kind, sc = "nccl_tuning", ctx.scenario
    if not ctx.baseline.step.collectives or ctx.n_gpus == 1:
        return not_applicable(kind, "single GPU: no collectives", "config change")
    eff = sc.efficiency
    curves = _curves(ctx)
    tuned = _alternative_call_s(curves, "nccl_tuned")
    env = "NCCL_MIN_NCHANNELS=8, NCCL_PROTO=LL for small messages, NCCL_TOPO_FILE=<xml> on dual-socket hosts"
    adjust: Adjust | None = None
    bw_scale = eff.collective_bw_scale
    if tuned is not None:
        adjust = AllReducePath(tuned, float("inf"))
        source = "measured tuned-NCCL all-reduce curve (specs.collectives nccl_tuned, R6K-NCCL)"
    elif ctx.pcie:
        bw_scale = max(bw_scale, PCIE_TUNED_BUSBW / (_curve_busbw(curves) or PCIE_DEFAULT_BUSBW))
        source = "R6K-NCCL: 41.1 GB/s all-reduce busbw on 8 PCIe GPUs (3 switches, NCCL_MIN_NCHANNELS=8)"
    else:
        bw_scale = max(bw_scale, NVLS_OVER_RING)
        source = "NVIDIA/nccl-tests#212: NVLS ~480 GB/s vs ring ~370 GB/s on 8x H100"
        env = "NCCL_NVLS_ENABLE=1 (NVSwitch systems), NCCL_ALGO=NVLS,Ring"
    inflated = eff.collective_latency_scale > 1.0
    if adjust is None and bw_scale <= eff.collective_bw_scale * 1.001 and not inflated:
        return not_applicable(kind, "collectives already at the tuned bus bandwidth and latency floor",
                              "config change")

    change = Change.of(efficiency_floor={"collective_bw_scale": bw_scale})
    optimistic = replace(change, efficiency_ceiling=(("collective_latency_scale", 1.0),))  # floor back to measured
    nominal = WhatIf(kind, scenario=change, adjust=adjust)
    best = WhatIf(kind, scenario=optimistic, adjust=adjust) if inflated else nominal
    validate = f"nccl-tests all_reduce_perf -b 8 -e 512M on the TP group before/after; set {env}"
    pre = (f"bus bandwidth reachable on this topology ({source})",)
    note = "latency-bound small messages gain little" if ctx.pcie else ""
    if inflated:
        note += (f"{'; ' if note else ''}upper bound: the in-situ latency (×{eff.collective_latency_scale:.2f} the "
                 "isolated floor) falls back to the floor if it is protocol choice (dual-socket 48 → 26 µs, "
                 "R6K-NCCL), not rank skew")
    return Proposal(kind, True, None, "config change", pre, validate, whatif=nominal, bounds=(nominal, best),
                    note=note, details={"bw_scale": bw_scale, "source": source})


def _curve_busbw(curves: CollectiveCurves) -> float:
    """All-reduce bus bandwidth of the NCCL curve (specs.collectives) or the perfmodel's fallback."""
    inner = curves.curves.get("all_reduce")
    return float(inner.bus_bw_bytes_per_s) if inner is not None else 0.0


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
    if ctx.pcie:
        return not_applicable(kind, "the fused all-reduce kernels need NVLink peer memory; this system is PCIe",
                              "new kernel", validate)
    if not sc.cuda_graphs:
        return not_applicable(kind, "the fusion pass needs torch.compile with CUDA graphs (enforce-eager is on)",
                              "config change", validate)
    calls = _ar_calls(ctx)
    norm_call_s = _measured_norm_call_s(ctx)

    adjust = NormFusion(norm_call_s)
    pre = ("vLLM with FlashInfer all-reduce fusion", "torch.compile + CUDA graphs")
    return Proposal(kind, True, None, "config change", pre, validate, whatif=WhatIf(kind, adjust=adjust),
                    details={"all_reduce_calls": calls})


def _measured_norm_call_s(ctx: Context) -> float:
    """Median runtime of one norm kernel in the calibration trace (0 without one: the model has no norm time)."""
    cal = ctx.calibration
    return cal.class_per_call_s.get("norm", 0.0) if cal is not None else 0.0
