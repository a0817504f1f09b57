"""The custom all-reduce an engine would run, per message, and what one call costs on a PCIe topology.

Does: the engine's gates (may it run custom all-reduce at all here?) and its per-message rule (which kernel it
launches), then a per-call cost on the links of a `specs.pcie_topology.PcieTopology`:
  gates      vLLM (VLLM-CAR, custom_all_reduce.py, CustomAllreduce.__init__): `world_size > 2 and not
             fully_connected` -> "Custom allreduce is disabled because it's not supported on more than two
             PCIe-only GPUs" (fully_connected = NVLink between every pair); SGLang carries the same code (its
             custom AR equals NCCL at 8 PCIe GPUs, AIC-COMM, reference §2c). A build that lifts it is named by a
             local version label (`--engine-version 0.24.0+pcie-ar`, or `+pcie-ar` for the newest): `pcie-ar`
             runs vLLM's own kernels, `pcie-ar-cpp` the community fork's C++ one-shot (local-inference-lab/vllm#261,
             VLLM_PCIE_ALLREDUCE_BACKEND=cpp). Symmetric-memory all-reduce is no alternative on compute
             capability 12.0: vLLM's SYMM_MEM_ALL_REDUCE_MAX_SIZES (vllm/distributed/device_communicators/
             all_reduce_utils.py) lists sizes for 9.0 and 10.0 only (local-inference-lab/vllm#261: not on SM120).
  rule       vLLM's kernel choice (csrc/custom_all_reduce.cuh, REDUCE_CASE): 2 GPUs one-shot; otherwise one-shot
             below 512 KiB (≤ 4 GPUs) or 256 KiB (≤ 8 GPUs), two-shot above, up to max_size 8 MiB (VLLM-CAR;
             NCCL above); the fork's cpp backend: one-shot below VLLM_CPP_AR_1STAGE_NCCL_CUTOFF = 56 KiB, NCCL
             above (reference §2c). The engine does not pick the faster path per message: a message its rule
             gives to custom all-reduce runs there even where NCCL would be faster.
  cost       one-shot  t = floor(n) + all_to_all_s(bytes)          every rank reads every peer's whole buffer
             two-shot  t = 2·floor(n) + all_to_all_s(2·bytes / n)  reduce-scatter then all-gather, 1/n chunks
             NCCL ring t = floor_nccl + 2(n−1)/n · bytes / ring_bw  (the same links, ring order)
             seconds, bytes; all_to_all_s and ring_bw from the topology (busiest link). floor(n): the measured
             one-shot latency at 1 KB (2 GPUs 4.1 µs AIC-COMM vLLM graph AR; 4: 6.1 µs, 8: 7.5 µs R6K-ONESHOT);
             two-shot pays two such barriers (assumption); floor_nccl the NCCL curve's measured floor.
             The track prices the custom path against NCCL on the same links: ratio = t_custom / t_ring, applied
             to the step's all-reduce term (the measured NCCL curve with its in-situ scale), so the box's absolute
             link speed cancels and the calibration stays. Check against R6K-ONESHOT / R6K-NCCL on a switch box
             (switch-2x4, 55 GB/s links, NCCL floor 24.4 µs): one-shot 256 KiB 84 µs (measured 73.6), ring 33 µs
             (28.0); custom wins at 32 KiB and loses at 64 KiB, as measured (16.5 vs 24.5 µs; 25.9 vs 24.1 µs),
             crossover ≈ 64 KiB (the fork's cutoff: 56 KiB).
Does not: model NVLS/multicast (NVLink floors stand for them), rank skew (the in-situ scale carries it), or the
engine's 16-byte alignment rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.perfmodel.scenario import Scenario
from servescope.planner.whatif import Collective, StepView
from servescope.specs.collectives import CollectiveCurve, curve_time_s
from servescope.specs.pcie_topology import PcieTopology

VLLM_CUSTOM_AR_MAX_BYTES = 8192 * 1024  # VLLM-CAR max_size
VLLM_CUSTOM_AR_WORLD_SIZES = (2, 4, 6, 8)  # VLLM-CAR
PCIE_ONESHOT_FLOOR_S = {2: 4.1e-6, 4: 6.1e-6, 8: 7.5e-6}  # AIC-COMM (2 GPUs); R6K-ONESHOT (4, 8 GPUs)
ONESHOT_BELOW = ((4, 512 * 1024), (8, 256 * 1024))  # csrc/custom_all_reduce.cuh REDUCE_CASE: (≤ GPUs, bytes)
FORK_NCCL_CUTOFF_BYTES = 56 * 1024  # VLLM_CPP_AR_1STAGE_NCCL_CUTOFF=56KB (local-inference-lab/vllm#261; R6K-COMM)
NVLINK_CUSTOM_AR_FLOOR_S = 4.6e-6  # AIC-COMM H100 SXM vLLM custom AR at 1 KB
NVLINK_CUSTOM_AR_BW_FRACTION = 0.78  # DERIVED: AIC-COMM H100 custom AR 16 MB = 92.4 µs two-shot at 450 GB/s
PATCH_LABELS = {"pcie-ar": "vllm", "pcie-ar-cpp": "fork"}  # local version label -> which kernels' rule
SYMM_MEM_CAPABILITIES = ("sm_90", "sm_100")  # vLLM SYMM_MEM_ALL_REDUCE_MAX_SIZES keys "9.0", "10.0"
OWN_ALLREDUCE_BACKEND = "trtllm"  # TRT-LLM has its own all-reduce (not vLLM's code): the vLLM/SGLang gate is not its
VLLM_PCIE_GATE = ("the engine refuses it: custom all-reduce is off on more than two PCIe-only GPUs without NVLink "
                  "between every pair (vllm/distributed/device_communicators/custom_all_reduce.py: 'Custom "
                  "allreduce is disabled because it's not supported on more than two PCIe-only GPUs')")
SYMM_MEM_NOTE = ("no symmetric-memory all-reduce either: vLLM's SYMM_MEM_ALL_REDUCE_MAX_SIZES has sizes for compute "
                 "capability 9.0 and 10.0 only")
PATCHED_HOW = "a build that lifts the gate: --engine-version VERSION+pcie-ar (vLLM's kernels) or +pcie-ar-cpp (the fork)"


def patched_rule(engine_build: str) -> str | None:
    """'vllm' or 'fork' when the engine build's local label names a build that lifts the PCIe gate, else None."""
    found = [PATCH_LABELS[x] for x in engine_build.split(".") if x in PATCH_LABELS]
    return found[-1] if found else None


def engine_path(rule: str, n_gpus: int, nbytes: float) -> str:
    """The kernel the engine launches for one message: 'one_shot', 'two_shot' or 'nccl' (module docstring)."""
    if rule == "fork":
        return "one_shot" if nbytes < FORK_NCCL_CUTOFF_BYTES else "nccl"
    if nbytes >= VLLM_CUSTOM_AR_MAX_BYTES:
        return "nccl"
    if n_gpus == 2 or any(n_gpus <= most and nbytes < below for most, below in ONESHOT_BELOW):
        return "one_shot"
    return "two_shot"


def oneshot_floor_s(n_gpus: int) -> float:
    """Measured one-shot latency floor (s) for the next measured GPU count ≥ n (module docstring)."""
    return next((PCIE_ONESHOT_FLOOR_S[n] for n in sorted(PCIE_ONESHOT_FLOOR_S) if n >= n_gpus), 7.5e-6)


@dataclass(frozen=True)
class TopologyAllReduce:
    """Custom all-reduce against the NCCL ring on one PCIe topology (module docstring: cost)."""

    topology: PcieTopology  # the TP group's GPUs only
    gpu_pcie_bw: float  # bytes/s per direction of one GPU's x16 link (specs.hardware)
    nccl_floor_s: float

    def custom_s(self, path: str, nbytes: float) -> float:
        """One call on `path` ('one_shot' | 'two_shot'), seconds."""
        n, floor = self.topology.n_gpus, oneshot_floor_s(self.topology.n_gpus)
        if path == "one_shot":
            return floor + self.topology.all_to_all_s(nbytes, self.gpu_pcie_bw)
        return 2 * floor + self.topology.all_to_all_s(2 * nbytes / n, self.gpu_pcie_bw)

    def ring_s(self, nbytes: float) -> float:
        """One NCCL ring all-reduce on the same links, seconds."""
        n = self.topology.n_gpus
        return self.nccl_floor_s + 2 * (n - 1) / n * nbytes / self.topology.ring_bw(self.gpu_pcie_bw)

    def ratio(self, path: str, nbytes: float) -> float:
        """Custom over NCCL per call (1 where the engine keeps NCCL)."""
        return 1.0 if path == "nccl" else self.custom_s(path, nbytes) / self.ring_s(nbytes)


@dataclass(frozen=True)
class NvlinkFormula:
    """One custom all-reduce call over NVLink, (floor s, time s): one-shot floor + (n−1)·bytes / bw, two-shot
    2·floor + 2(n−1)/n · bytes / bw, bw = 0.78 × NVLink per direction, floor 4.6 µs (constants above)."""

    n_gpus: int
    nvlink_bw: float

    def __call__(self, path: str, nbytes: float) -> tuple[float, float]:
        n, floor = self.n_gpus, NVLINK_CUSTOM_AR_FLOOR_S
        bw = NVLINK_CUSTOM_AR_BW_FRACTION * self.nvlink_bw
        if path == "one_shot":
            return floor, floor + (n - 1) * nbytes / bw
        return 2 * floor, 2 * floor + 2 * (n - 1) / n * nbytes / bw


@dataclass(frozen=True)
class MeasuredOneShot:
    """A measured one-shot curve (specs.collectives `pcie_oneshot`, R6K-ONESHOT) at exactly n GPUs, used only inside
    its measured message range."""

    curve: CollectiveCurve

    def covers(self, nbytes: float) -> bool:
        return bool(self.curve.message_bytes) and nbytes <= self.curve.message_bytes[-1]

    def call_s(self, sc: Scenario, nbytes: float) -> float:
        """Scaled like the perfmodel's curves: floor · latency_scale + (t − floor) / bw_scale."""
        eff, floor = sc.efficiency, float(self.curve.latency_floor_s)
        t = float(curve_time_s(self.curve, nbytes))
        return floor * eff.collective_latency_scale + max(t - floor, 0.0) / eff.collective_bw_scale


@dataclass(frozen=True)
class EngineAllReduce:
    """Step adjustment: every all-reduce call the engine's rule gives to its custom path (`engine_path`) costs that
    path — no min() with the current one, the engine does not choose per message; calls it keeps on NCCL are
    unchanged. A PCIe call is the measured one-shot curve where no topology was named and the curve covers the
    message (`measured`), else the current call × TopologyAllReduce.ratio; an NVLink call is `nvlink(path, bytes)`
    (floor, time) scaled like the curves."""

    rule: str  # 'vllm' | 'fork'
    n_gpus: int
    topology: TopologyAllReduce | None = None
    measured: MeasuredOneShot | None = None
    nvlink: NvlinkFormula | None = None

    def per_call_s(self, sc: Scenario, old_s: float, nbytes: float) -> tuple[float, str]:
        """(new seconds per call, the path and how it was priced)."""
        path = engine_path(self.rule, self.n_gpus, nbytes)
        if path == "nccl":
            return old_s, "nccl (the engine keeps NCCL at this size)"
        if self.measured is not None and path == "one_shot" and self.measured.covers(nbytes):
            return self.measured.call_s(sc, nbytes), "one_shot (measured curve, R6K-ONESHOT)"
        if self.topology is not None:
            return old_s * self.topology.ratio(path, nbytes), f"{path} (topology {self.topology.topology.name})"
        assert self.nvlink is not None
        eff = sc.efficiency
        floor, t = self.nvlink(path, nbytes)
        return (floor * eff.collective_latency_scale + max(t - floor, 0.0) / eff.collective_bw_scale,
                f"{path} (NVLink formula)")

    def __call__(self, sc: Scenario, view: StepView) -> StepView:
        old = view.collectives.get("all_reduce")
        if old is None or old.calls_per_step == 0:
            return view
        per_call, _ = self.per_call_s(sc, old.time_s / old.calls_per_step, old.bytes_per_call)
        return view.with_collective("all_reduce", Collective(old.calls_per_step, old.bytes_per_call,
                                                             per_call * old.calls_per_step))
