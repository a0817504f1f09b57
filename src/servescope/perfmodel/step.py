"""One engine step (decode, speculative verify, or a prefill chunk): its terms, dominant term and floor.

Two stages, so a fit can re-evaluate many efficiencies on fixed scenarios without rebuilding anything:
`step_parts` (efficiency-free times at 100 % of each measured ceiling, numpy arrays) and `combine_step`
(efficiencies applied). `step_arrays` = both; `decode_step` / `prefill_step` wrap it for one point.
`step_parts` composes one function per term, each with its line of the formula below as its docstring:
step_terms.py (geometry, weights, experts, attention/KV, indexer, recurrent, collectives, floor, overhead inputs),
step_curves.py (the measured GEMM, expert and attention curves), step_model.py (the per-scenario cache).

Combination (docs/model.md §Terms). Per kernel class c ∈ {gemm, moe, attention} the time is a roofline
    t_c = max(memory_c / (BW_achieved · bw_eff_c), flops_c / (peak_c · compute_eff_c))
with BW_achieved = datasheet BW × the GPU's measured/sourced `hbm_bw_efficiency` (specs/data/gpus), and is
attributed whole to one term: `weights` (gemm/moe memory-bound), `kv` (attention memory-bound) or `compute`.
Dense GEMMs on a GPU with a measured GEMM curve (gemm_curve.py, data/gemm_efficiency.toml; own or transferred from
its family) are priced as measured instead, with no fitted efficiency on top (`Efficiency.gemm_curve` = 1):
    t_gemm = max(weight bytes / datasheet BW, FLOPs / peak) · ratio(M),  M = padded tokens per rank in the step
Where aiconfigurator's per-op curves cover the GPU and engine (Efficiency.op_curves, measured_ops.py, combine.py):
    t_gemm = Σ_listed GEMMs count · max(curve(M), N·K·bytes / datasheet BW) + the unlisted rest's roofline
    t_attn = max(Σ_layers curve(b, L) ≥ KV read / datasheet BW, + KV writes / achieved BW; FLOPs / peak)   (decode)
and the curve-priced kernels leave the per-kernel overhead in a graph replay.
Two mixers run their own kernels and are their own terms, each a roofline with the attention efficiencies:
`indexer` (DeepSeek sparse-attention indexer: fp8 keys read, q·k logits at the fp8 peak; ops.py) and `recurrent`
(linear-attention / Mamba state read+write, recurrence or chunked scan; mixers.py).
    step = weights + kv + compute + communication + overhead + indexer + recurrent    (no overlap: exact sum)
    communication = Σ collectives calls · (latency·lat_scale + bandwidth part / bw_scale) on the measured curves
    overhead      = kernels · (kernel_overhead_s in a CUDA graph | launch_overhead_s eager/prefill) + routing + cpu
                    + max(host dispatch − the GPU terms, 0) on a deployment run without CUDA graphs (graphs.py
                    eager_host_s: the host issues each kernel and collective of a decode step one op at a time,
                    so the step takes max(GPU, host)),
                    routing = graphed · MoE layers · routing kernels per layer · their measured duration
                    (moe_host.py; 0 for a dense model, an eager step, or where a measured MoE curve prices the layer),
                    cpu = cpu_overhead_s + cpu_overhead_per_seq_s · batch, or on an engine that overlaps
                    scheduling with execution f·cpu + max((1 − f)·cpu − the GPU terms, 0), f = overlap_exposed_frac
                    (the share the overlap cannot hide, fitted) (Scenario.overlaps_cpu: TRT-LLM's
                    default, or vLLM with --async-scheduling)
Routed experts read per GPU: the distinct experts the step's tokens touch under skewed (power-law) loads (routing.py;
uniform E · (1 − (1 − k/E)^T) with --routing uniform), those on the busiest of ep GPUs holding whole experts
(ep_balance.py; at ep = 1 every GPU reads a 1/tp slice of each). Expert compute is set by the busiest expert-parallel rank: the mean load times the expected maximum of ep rank
loads, from the sampling noise of B·k routed tokens and the skewed loads' placement variance (`moe_imbalance`). A decode batch inside the
engine's CUDA-graph capture range runs padded to the next captured size (GEMM/expert compute of the padded rows;
graphs.py); beyond it the step runs eagerly.
Multi-token queries (t tokens per sequence: speculative verify, prefill chunks): KV read once per sequence over
L + t − 1 (decode) or L + t (prefill) tokens; attention FLOPs t × the mean context a query sees, L + (t − 1)/2
(verify) or L + (t + 1)/2 (prefill, causal). A prefill chunk on an MLA model with L cached tokens also pays the
context up-projection (kv_b_proj GEMM over L, its k/v written and read; mixers.py), in the attention class; so does
a verify block where the engine's MLA backend runs it on its prefill path (`verify_as_prefill`: vLLM's Triton MLA,
specs/data/engines/), with prefill attention FLOPs and the attention block's kernels launched eagerly.
MoE dispatch under attention-DP + EP follows the engine default (`dispatch_mode`): all-to-all (TRT-LLM) or
all-gather + reduce-scatter (vLLM, SGLang).
`floor_s` = max(all bytes / datasheet BW, all FLOPs / peak FLOP/s) + collectives on the measured curves (no
efficiency losses, no launch/CPU overhead): what the hardware could do at best for this step.
What it does not: serving dynamics (serving.py) or memory capacity (memory.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel import hw
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.ep_balance import moe_imbalance
from servescope.perfmodel.step_curves import (
    attention_curve_parts,
    dense_curve_parts,
    gemm_ratio_parts,
    measured_attention,
    moe_curve_over_roofline,
    moe_curve_parts,
)
from servescope.perfmodel.step_model import dispatch_mode, model_for, per_scenario
from servescope.perfmodel.step_terms import (
    MLA_PREFILL_PATH_KERNELS_PER_LAYER,
    attention_parts,
    attention_work,
    collective_parts,
    collectives,
    expert_parts,
    expert_work,
    floor_s,
    indexer_work,
    mixer_parts,
    overhead_parts,
    recurrent_work,
    step_shape,
    verify_as_prefill,
    weights_parts,
)
from servescope.perfmodel.step_types import (
    HOST,
    KERNEL_OVERHEAD,
    TERMS,
    Arr,
    ArrayLike,
    CollectiveCost,
    CollParts,
    StepParts,
    StepPrediction,
    map_parts,
    stack_parts,
)

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

__all__ = ["HOST", "KERNEL_OVERHEAD", "MLA_PREFILL_PATH_KERNELS_PER_LAYER", "TERMS", "CollParts", "CollectiveCost", "StepParts",
           "StepPrediction", "collective_costs", "combine_step", "decode_step", "dispatch_mode", "map_parts",
           "measured_attention", "model_for", "moe_curve_over_roofline", "moe_imbalance", "per_scenario",
           "prefill_step", "public_name", "stack_parts", "step_arrays", "step_parts", "verify_as_prefill"]


def step_parts(sc: Deployment, batch: ArrayLike, ctx: ArrayLike, tokens_per_seq: ArrayLike,
               prefill: bool = False) -> StepParts:
    """Efficiency-free parts of a step: numpy arrays (broadcast) of batch (sequences, all dp ranks), context
    length and tokens per sequence. For prefill, ctx is the context before the chunk. One function per term
    (step_terms.py: the roofline; step_curves.py: the measured curves), each with its line of the formula."""
    mdl = model_for(sc)
    o, s = mdl.ops, step_shape(sc, batch, ctx, tokens_per_seq, prefill)
    experts, attn = expert_work(sc, o, s), attention_work(o, s)
    idx, rec = indexer_work(o, s), recurrent_work(o, s)
    colls = collectives(mdl, s)
    coll = collective_parts(colls, s)
    return StepParts(
        **weights_parts(o, s), **expert_parts(o, experts), **attention_parts(o, attn), **mixer_parts(o, s, idx, rec),
        **coll, floor_s=floor_s(o, s, experts, attn, idx, rec, coll), **overhead_parts(sc, o, s),
        **gemm_ratio_parts(sc, o, s), **moe_curve_parts(sc, o, s, experts), **dense_curve_parts(sc, mdl, s),
        **attention_curve_parts(sc, o, s, attn), batch=s.b_all, tokens=s.t_glob, colls=colls,
    )


def step_arrays(sc: Deployment, batch: ArrayLike, ctx: ArrayLike, tokens_per_seq: ArrayLike,
                prefill: bool = False) -> dict[str, Arr]:
    """Vectorised step: `combine_step(step_parts(...), sc.efficiency)`."""
    return combine_step(step_parts(sc, batch, ctx, tokens_per_seq, prefill), sc.efficiency)


def public_name(key: str) -> str:
    """Internal collective key -> the name printed (the lm_head logits gather is `gather_logits`)."""
    return "gather_logits" if key == hw.ALL_GATHER + ":logits" else key


def collective_costs(p: StepParts, a: dict[str, Arr], i: int = 0) -> dict[str, CollectiveCost]:
    """The collectives of point i of a combined step, by public name."""
    def at(x: Arr) -> float:
        return float(np.broadcast_to(x, a["step"].shape).ravel()[i])

    return {public_name(k): CollectiveCost(c.calls, at(c.bytes_per_call), at(a["coll:" + k]))
            for k, c in p.colls.items()}


def _to_prediction(sc: Deployment, p: StepParts, batch: int, ctx: int, kind: str) -> StepPrediction:
    a = combine_step(p, sc.efficiency)
    terms = {k: float(a[k].ravel()[0]) for k in TERMS}
    classes = {k: float(a[k].ravel()[0]) for k in ("gemm", "moe", "attention", "communication")}
    classes.update({KERNEL_OVERHEAD: float(a["kernels"].ravel()[0]), HOST: float(a["cpu"].ravel()[0])})
    return StepPrediction(
        step_time_s=float(a["step"].ravel()[0]), terms_s=terms, dominant=max(terms, key=lambda k: terms[k]),
        collectives=collective_costs(p, a), floor_s=float(a["floor"].ravel()[0]), class_time_s=classes,
        batch=batch, tokens=int(round(float(a["tokens"].ravel()[0]))), context_len=ctx, kind=kind,
    )


def decode_step(sc: Deployment, batch: int, context_len: int, tokens_per_seq: int = 1) -> StepPrediction:
    """One decode step of `batch` sequences (all dp ranks) at `context_len` tokens of context each.
    tokens_per_seq > 1 is a speculative verification of k+1 tokens per sequence."""
    if batch < 1 or context_len < 0 or tokens_per_seq < 1:
        raise ScenarioError(f"decode_step: batch={batch}, context_len={context_len}, tokens={tokens_per_seq}")
    return _to_prediction(sc, step_parts(sc, batch, context_len, tokens_per_seq), batch, context_len, "decode")


def prefill_step(sc: Deployment, tokens: int, batch: int = 1, context_len: int = 0) -> StepPrediction:
    """One prefill chunk of `tokens` tokens in total, split evenly over `batch` sequences that already hold
    `context_len` tokens of context each (chunked prefill continues after earlier chunks)."""
    if tokens < 1 or batch < 1 or context_len < 0:
        raise ScenarioError(f"prefill_step: tokens={tokens}, batch={batch}, context_len={context_len}")
    p = step_parts(sc, batch, context_len, tokens / batch, prefill=True)
    return _to_prediction(sc, p, batch, context_len, "prefill")
