"""The step model's per-scenario state: the ops and collective timers of a scenario, built once and cached
(`model_for`), and what else is cached beside them (`per_scenario`). The MoE dispatch path an engine's default takes
under attention-DP + EP (`dispatch_mode`) sets which collective groups there are.

What it does not: price anything (step_terms.py, step_curves.py, step.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from servescope.perfmodel import hw
from servescope.perfmodel.gemm_shapes import dense_gemms
from servescope.perfmodel.ops import build_ops

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

__all__ = ["StepModel", "dispatch_mode", "model_for", "per_scenario"]


class StepModel:
    """Ops and collective timers of one scenario, built once. They do not depend on the efficiencies, so the
    cache key leaves them out (fitting re-evaluates many efficiencies on the same scenarios)."""

    def __init__(self, sc: Deployment):
        self.sc, self.ops, self.gemms = sc, build_ops(sc), dense_gemms(sc)
        self.memo: dict[tuple[object, ...], object] = {}  # per_scenario: what else depends on version/routing/switches
        self.timers: dict[str, hw.CollectiveTimer] = {}
        for name, n in self._groups().items():
            curves = hw.load_curves(sc.gpu, n, sc.interconnect)
            self.timers[name] = hw.CollectiveTimer(curves, name.split(":")[0], n)

    def _groups(self) -> dict[str, int]:
        sc, o = self.sc, self.ops
        g: dict[str, int] = {}
        if sc.tp > 1:
            g[hw.ALL_REDUCE] = sc.tp
            g[hw.ALL_GATHER + ":logits"] = sc.tp
        if o.moe_a2a_layers:
            if sc.ep > 1 and dispatch_mode(sc.backend) == hw.ALL_TO_ALL:
                g[hw.ALL_TO_ALL] = sc.ep
            else:
                g[hw.ALL_GATHER] = sc.tp * sc.dp
                g[hw.REDUCE_SCATTER] = sc.tp * sc.dp
        if sc.pp > 1:
            g[hw.SEND_RECV] = 2
        return g


# How each engine's default moves tokens to and from the experts under attention-DP + expert parallelism (dp > 1,
# ep > 1). vLLM 0.19: ParallelConfig.all2all_backend = "allgather_reducescatter" (vllm/config/parallel.py L160);
# SGLang 0.5.9: moe_a2a_backend = "none" (server_args.py L495), DP attention gathers the tokens of all DP ranks and
# reduce-scatters the MoE output (srt/layers/dp_attention.py dp_gather_*, dp_reduce_scatter_tensor). TRT-LLM:
# all-to-all dispatch/combine (UNVERIFIED: no TensorRT-LLM source was read here; the model's earlier choice kept).
# DeepEP low-latency / normal modes are opt-in in both open engines and no measured DeepEP curve is bundled.
_DISPATCH = {"vllm": "all_gather_reduce_scatter", "sglang": "all_gather_reduce_scatter", "trtllm": hw.ALL_TO_ALL}


def dispatch_mode(backend: str) -> str:
    """The MoE dispatch/combine path of an engine's default under attention-DP + EP (see _DISPATCH)."""
    return _DISPATCH.get(backend, hw.ALL_TO_ALL)


_CacheKey = tuple[int, int, object, int, int, int, int, str | None, str]
_CACHE: dict[_CacheKey, tuple[Deployment, StepModel]] = {}


def _key(sc: Deployment) -> _CacheKey:
    return (id(sc.model), id(sc.gpu), sc.quant, sc.tp, sc.ep, sc.pp, sc.dp, sc.interconnect, sc.backend)


def model_for(sc: Deployment) -> StepModel:
    """The cached ops and collective timers of a scenario (loads the collective curves on first use)."""
    key = _key(sc)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].model is sc.model and hit[0].gpu is sc.gpu:
        return hit[1]
    if len(_CACHE) > 4096:
        _CACHE.clear()
    m = StepModel(sc)
    _CACHE[key] = (sc, m)  # keeps the objects alive so their ids stay unique
    return m


def per_scenario(what: str, sc: Deployment, fn: Callable[[], object]) -> object:
    """`fn()` cached with the scenario's ops (model_for), per engine version, routing and curve switches."""
    eff = sc.efficiency
    key = (what, sc.engine_version, sc.routing, float(np.mean(eff.op_curves)), float(np.mean(eff.moe_curve)))
    memo = model_for(sc).memo
    if key not in memo:
        memo[key] = fn()
    return memo[key]
