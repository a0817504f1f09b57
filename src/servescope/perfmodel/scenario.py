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

from servescope.errors import ScenarioError
from servescope.perfmodel.deployment import Deployment, check_layout
from servescope.perfmodel.efficiency import Efficiency, default_efficiency
from servescope.perfmodel.memory import check_fits
from servescope.perfmodel.step import model_for
from servescope.specs.engines import ENGINES
from servescope.specs.hardware import GpuSpec, load_gpu
from servescope.specs.kv_cache import engine_kv
from servescope.specs.models import ModelSpec, load_model
from servescope.specs.quant import QuantConfig, scheme

__all__ = ["Deployment", "Scenario", "check_layout"]


@dataclass(frozen=True, repr=False)  # repr: Deployment's short one
class Scenario(Deployment):
    """Everything a prediction depends on (the fields of `Deployment`). Use `Scenario.build` to construct from
    names."""

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
    ) -> Scenario:
        """Scenario from names. quant="native" (the default, as the CLI's) keeps the checkpoint's own scheme per part
        (moe_quant overrides the experts). engine_version picks the engine's defaults of that release (overlap
        scheduler, memory share; specs.engines; "" = the newest in the data);
        gpu_memory_utilization overrides the engine's memory share. kv_quant=None takes the KV format the backend's default allocates for the checkpoint
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
        sc = Scenario(m, g, qc, tp, ep, pp, dp, cuda_graphs, isl, osl, backend, interconnect, eff,
                      kv_explicit=bool(kv_quant), engine_version=engine_version,
                      gpu_memory_utilization=gpu_memory_utilization)
        check_layout(sc)
        model_for(sc)  # loads the collective curves now: a group beyond one NVLink domain fails here
        if check_memory:
            check_fits(sc)
        return sc
