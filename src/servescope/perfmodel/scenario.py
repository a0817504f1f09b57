"""A serving scenario: a `Deployment` (model + GPU + parallel layout + quantization + lengths + efficiencies, see
deployment.py) built from names and checked against the step model and memory.

What it does: `Scenario.build(...)` resolves names (specs), derives the KV format and efficiencies the engine uses,
and raises one-line ScenarioError for a layout that cannot run: TP not dividing attention heads, EP not dividing
experts (deployment.check_layout), a collective group beyond one NVLink domain (step.model_for), a model that does
not fit (memory.check_fits).
What it does not: compute any time (see step.py) or know about measured data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from servescope.errors import ScenarioError
from servescope.perfmodel.deployment import Deployment, check_layout
from servescope.perfmodel.efficiency import Efficiency, default_efficiency
from servescope.perfmodel.memory import check_fits
from servescope.perfmodel.step import model_for
from servescope.specs.engines import ENGINES
from servescope.specs.hardware import GpuSpec, load_gpu
from servescope.specs.kv_cache import engine_kv
from servescope.specs.models import ModelSpec, load_model
from servescope.specs.pcie_topology import PcieTopology, load_pcie_topology, read_topo_matrix
from servescope.specs.quant import QuantConfig, scheme

__all__ = ["Deployment", "Scenario", "check_layout"]


@dataclass(frozen=True, repr=False)  # repr: Deployment's short one
class Scenario(Deployment):
    """Everything a prediction depends on (the fields of `Deployment`). Use `Scenario.build` to construct from
    names. Two fields only the planner reads: `pcie_topology` (the box's PCIe switches, specs.pcie_topology; None:
    the default preset) and `engine_build` (the local label of --engine-version, e.g. `pcie-ar` for a build that
    lifts the engine's PCIe custom all-reduce gate; planner.allreduce_paths)."""

    pcie_topology: PcieTopology | None = None
    engine_build: str = ""

    @staticmethod
    def build(
        model: str | ModelSpec,
        gpu: str | GpuSpec,
        tp: int = 1,
        ep: int = 1,
        pp: int = 1,
        dp: int = 1,
        quant: str = "native",
        moe_quant: str | None = None,
        kv_quant: str | None = None,
        cuda_graphs: bool = True,
        isl: int = 1024,
        osl: int = 512,
        backend: str = "vllm",
        interconnect: str | None = None,
        efficiency: Efficiency | None = None,
        check_memory: bool = True,
        engine_version: str = "",
        gpu_memory_utilization: float | None = None,
        pcie_topology: str | Path | PcieTopology | None = None,
    ) -> Scenario:
        """Scenario from names. quant="native" (the default, as the CLI's) keeps the checkpoint's own scheme per part
        (moe_quant overrides the experts). engine_version picks the engine's defaults of that release (overlap
        scheduler, memory share; specs.engines; "" = the newest in the data);
        gpu_memory_utilization overrides the engine's memory share. A local label (`0.24.0+pcie-ar`, `+pcie-ar` =
        the newest) names the build, not the release: it is kept as engine_build and does not change which defaults
        or curves price the scenario. pcie_topology: a preset name, an `nvidia-smi topo -m` file (Path) or a
        PcieTopology. kv_quant=None takes the KV format the backend's default allocates for the checkpoint
        (`specs.kv_cache.engine_kv`: e.g. vLLM bf16 unless the checkpoint has a kv_cache_scheme).
        Raises UnknownName (model, GPU, quant) or ScenarioError (layout, memory)."""
        m = model if isinstance(model, ModelSpec) else load_model(model)
        g = load_gpu(gpu) if isinstance(gpu, str) else gpu
        if backend not in ENGINES:
            raise ScenarioError(f"unknown backend {backend!r}; known: {', '.join(ENGINES)}")
        if quant == "native":
            qc = m.native_quant
            if moe_quant:
                qc = replace(qc, experts=scheme(moe_quant))
        else:
            qc = QuantConfig.uniform(quant, moe_quant)
        # No kv_quant: the format the engine's default ("auto") allocates for this checkpoint (specs/kv_cache.py).
        qc = qc.with_kv(kv_quant) if kv_quant else replace(qc, kv=engine_kv(m, backend, g).scheme)
        eff = efficiency or default_efficiency(g.generation, backend, g.name)
        release, _, build = engine_version.strip().partition("+")
        topo = (read_topo_matrix(pcie_topology) if isinstance(pcie_topology, Path)
                else load_pcie_topology(pcie_topology) if isinstance(pcie_topology, str) else pcie_topology)
        if topo is not None and topo.n_gpus < tp:
            raise ScenarioError(f"PCIe topology {topo.name} has {topo.n_gpus} GPUs, fewer than TP {tp}")
        sc = Scenario(m, g, qc, tp, ep, pp, dp, cuda_graphs, isl, osl, backend, interconnect, eff,
                      kv_explicit=bool(kv_quant), engine_version="" if release == "latest" else release,
                      gpu_memory_utilization=gpu_memory_utilization, pcie_topology=topo, engine_build=build)
        check_layout(sc)
        model_for(sc)  # loads the collective curves now: a group beyond one NVLink domain fails here
        if check_memory:
            check_fits(sc)
        return sc
