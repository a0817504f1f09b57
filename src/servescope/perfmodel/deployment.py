"""What a prediction prices — a model on GPUs with a parallel layout, quantization, workload lengths, an engine
and its efficiencies — and the layout rules no engine can break (`check_layout`).

What it does: `Deployment` (frozen), the fields every cost function reads (step, ops, mixers, memory take one),
and `with_` for a checked copy. `Scenario` (scenario.py) is a Deployment with `build(...)` from names, which also
checks that the model's collectives and memory work out; the cost functions depend on this module only, so that
the scenario can call them as it is built without an import cycle. Layout conventions (docs/model.md):
  n_gpus = tp · dp · pp.  Attention runs TP=tp inside each of dp attention-data-parallel ranks; routed experts are
  spread over ep GPUs and the rest of the group shards each expert: moe_tp = tp·dp / ep. For dense models dp is
  plain replication. `batch` in step functions is the number of sequences over all dp ranks of one instance.
What it does not: compute any time (see step.py) or know about measured data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Self

from servescope.errors import ScenarioError
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.routing import Routing
from servescope.specs.engines import Engine
from servescope.specs.engines import engine as resolve_engine
from servescope.specs.hardware import GpuSpec
from servescope.specs.kv_cache import engine_kv
from servescope.specs.models import ModelSpec
from servescope.specs.quant import QuantConfig


@dataclass(frozen=True)
class Deployment:
    """Everything a prediction depends on. Build one from names with `Scenario.build`."""

    model: ModelSpec
    gpu: GpuSpec
    quant: QuantConfig
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    cuda_graphs: bool = True
    isl: int = 1024
    osl: int = 512
    backend: str = "vllm"
    interconnect: str | None = None
    efficiency: Efficiency = field(default_factory=Efficiency)
    kv_explicit: bool = False  # kv_quant was given; else the KV format follows the engine's default (with_)
    # the engine prepares step n+1 on the CPU while the GPU runs step n (vLLM async scheduling, SGLang's and TRT-LLM's
    # overlap scheduler); None = what the engine version's default does (specs.engines, overlap.enabled)
    overlap_scheduler: bool | None = None
    engine_version: str = ""  # "" = the newest defaults in the data (specs.engines)
    # share of GPU memory the engine may use (vLLM --gpu-memory-utilization); None = the engine version's default
    gpu_memory_utilization: float | None = None
    routing: Routing = field(default_factory=Routing)  # how routed tokens spread over experts (routing.py)
    # a decode-only measurement (context fixed at isl, no prompts in the steps: serving.py), as many published
    # decode and speculative-decoding benchmarks are taken
    decode_only: bool = False

    @property
    def decode_context(self) -> float:
        """Tokens of context a decode step sees on average: isl + osl/2 in steady serving, isl when decode-only."""
        return float(self.isl) if self.decode_only else self.isl + self.osl / 2.0

    @property
    def engine(self) -> Engine:
        """The defaults this engine version runs with on this GPU's memory (specs.engines, a source per value): the
        one record the closed form and the simulation both read."""
        return resolve_engine(self.backend, self.engine_version, float(self.gpu.hbm_bytes))

    @property
    def overlaps_cpu(self) -> bool:
        """Whether this scenario's steps hide their CPU time behind the GPU's (step.py overhead): as set, else the
        engine version's default, off where the engine turns it off by itself (pipeline parallel)."""
        if self.overlap_scheduler is not None:
            return self.overlap_scheduler
        e = self.engine
        return e.overlap.enabled and not ("pp" in e.overlap.off_when and self.pp > 1)

    @property
    def memory_share(self) -> tuple[float, str, str]:
        """(share of GPU memory for weights + activations + KV, what it is a share of, where it came from)."""
        e = self.engine
        m = e.memory
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization, m.kv_mem_of, "as set"
        if m.kv_mem_fraction is not None:
            return m.kv_mem_fraction, m.kv_mem_of, f"{e.label} default"
        return self.efficiency.gpu_memory_utilization, "total", f"generic share ({self.backend} derives its own)"

    @property
    def n_gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def moe_tp(self) -> int:
        """GPUs sharing each routed expert: tp·dp / ep."""
        return max(1, (self.tp * self.dp) // self.ep)

    def with_(self, **changes: Any) -> Self:
        """A checked copy with some fields replaced (planner what-ifs). Without an explicit kv_quant, a new backend,
        GPU or model re-derives the KV format that engine allocates (specs.kv_cache.engine_kv), as `build` does."""
        sc = replace(self, **changes)
        if not sc.kv_explicit and "quant" not in changes and changes.keys() & {"backend", "gpu", "model"}:
            sc = replace(sc, quant=replace(sc.quant, kv=engine_kv(sc.model, sc.backend, sc.gpu).scheme))
        check_layout(sc)
        return sc

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.model.name} on {self.gpu.name}, tp={self.tp} ep={self.ep} pp={self.pp} "
                f"dp={self.dp}, {self.backend}, isl={self.isl} osl={self.osl})")


def check_layout(sc: Deployment) -> None:
    """Raise ScenarioError for layouts no engine can run."""
    m = sc.model
    for k in ("tp", "ep", "pp", "dp"):
        if getattr(sc, k) < 1:
            raise ScenarioError(f"{k}={getattr(sc, k)} must be >= 1")
    if sc.isl < 1 or sc.osl < 1:
        raise ScenarioError(f"isl={sc.isl} and osl={sc.osl} must be >= 1")
    if m.n_heads % sc.tp:
        raise ScenarioError(f"{m.name}: tp={sc.tp} does not divide {m.n_heads} attention heads")
    kv = m.n_kv_heads
    if m.attention_kind == "gqa" and kv % sc.tp and sc.tp % kv:
        raise ScenarioError(f"{m.name}: tp={sc.tp} neither divides nor is a multiple of {kv} KV heads")
    if sc.ep > 1 and not m.is_moe:
        raise ScenarioError(f"{m.name}: ep={sc.ep} on a dense model (no experts)")
    if m.is_moe and m.n_routed_experts % sc.ep:
        raise ScenarioError(f"{m.name}: ep={sc.ep} does not divide {m.n_routed_experts} experts")
    if (sc.tp * sc.dp) % sc.ep:
        raise ScenarioError(f"ep={sc.ep} does not divide tp*dp={sc.tp * sc.dp} GPUs")
    if sc.gpu_memory_utilization is not None and not 0.0 < sc.gpu_memory_utilization <= 1.0:
        raise ScenarioError(f"gpu_memory_utilization={sc.gpu_memory_utilization} must be within (0, 1]")
    if sc.pp > m.n_layers:
        raise ScenarioError(f"pp={sc.pp} exceeds {m.n_layers} layers")
