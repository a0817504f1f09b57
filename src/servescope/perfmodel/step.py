"""One engine step (decode, speculative verify, or a prefill chunk): its terms, dominant term and floor.

Combination (docs/model.md §Terms). Per kernel class c ∈ {gemm, moe, attention} the time is a roofline
    t_c = max(memory_c / (BW · bw_eff_c), flops_c / (peak_c · compute_eff_c))
and is attributed whole to one term: `weights` (gemm/moe memory-bound), `kv` (attention memory-bound) or
`compute` (any compute-bound class). Then
    step = weights + kv + compute + communication + overhead           (no overlap assumed: exact sum)
    communication = Σ collectives calls · (latency·lat_scale + bandwidth part / bw_scale)
    overhead      = kernels · (kernel_overhead_s with CUDA graphs | launch_overhead_s without, and for prefill)
                    + cpu_overhead_s + cpu_overhead_per_seq_s · batch
Routed experts read per GPU: E/ep · (1 − (1 − k/E)^(tokens in the step)) distinct experts per MoE layer (uniform
routing), so a batch-1 step reads only the k activated experts and a large batch reads them all.
`floor_s` = max(all bytes / peak BW, all FLOPs / peak FLOP/s) + collectives on the measured curves (no efficiency
losses, no launch/CPU overhead): what the hardware could do at best for this step.
What it does not: serving dynamics (serving.py) or memory capacity (memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from servescope.perfmodel import hw
from servescope.perfmodel.ops import ACT_BYTES, build_ops

TERMS = ("weights", "kv", "compute", "communication", "overhead")


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
    class_time_s: dict[str, float]  # trace kernel classes: gemm, moe, attention, communication, norm, other
    batch: int
    tokens: int  # tokens processed in the step (all dp ranks)
    context_len: int
    kind: str  # "decode" | "prefill"


class _Model:
    """Ops and collective timers of one scenario, built once. They do not depend on the efficiencies, so the
    cache key leaves them out (fitting re-evaluates many efficiencies on the same scenarios)."""

    def __init__(self, sc: Any):
        self.sc, self.ops = sc, build_ops(sc)
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
            if sc.ep > 1:
                g[hw.ALL_TO_ALL] = sc.ep
            else:
                g[hw.ALL_GATHER] = sc.tp * sc.dp
                g[hw.REDUCE_SCATTER] = sc.tp * sc.dp
        if sc.pp > 1:
            g[hw.SEND_RECV] = 2
        return g


_CACHE: dict[tuple, tuple[Any, _Model]] = {}


def _key(sc: Any) -> tuple:
    return (id(sc.model), id(sc.gpu), sc.quant, sc.tp, sc.ep, sc.pp, sc.dp, sc.interconnect)


def model_for(sc: Any) -> _Model:
    key = _key(sc)
    hit = _CACHE.get(key)
    if hit is not None and hit[0].model is sc.model and hit[0].gpu is sc.gpu:
        return hit[1]
    if len(_CACHE) > 4096:
        _CACHE.clear()
    m = _Model(sc)
    _CACHE[key] = (sc, m)  # keeps the objects alive so their ids stay unique
    return m


def _collectives(mdl: _Model, eff: Any, t_rank: np.ndarray, t_glob: np.ndarray) -> dict[str, tuple]:
    """{name: (calls, bytes per call, time with efficiencies, time on the measured curve)} for one step with
    t_rank tokens per attention rank (all arrays)."""
    sc, o = mdl.sc, mdl.ops
    lat, bws = eff.collective_latency_scale, eff.collective_bw_scale
    timers = mdl.timers
    h = o.hidden
    out: dict[str, tuple] = {}
    for name in timers:
        if name == hw.ALL_REDUCE:
            calls, msg = o.ar_per_step, t_rank * h * ACT_BYTES
        elif name == hw.ALL_GATHER + ":logits":
            calls, msg = 1, t_rank * (o.vocab / sc.tp) * ACT_BYTES
        elif name == hw.ALL_TO_ALL:
            calls, msg = 2 * o.moe_a2a_layers, t_rank * o.top_k * h * ACT_BYTES
        elif name in (hw.ALL_GATHER, hw.REDUCE_SCATTER):
            calls, msg = o.moe_a2a_layers, t_glob * h * ACT_BYTES
        else:  # send_recv between PP stages
            calls, msg = sc.pp - 1, t_rank * h * ACT_BYTES
        floor, bw_part = timers[name].parts_s(msg)
        out[name] = (calls, msg, calls * (floor * lat + bw_part / bws), calls * (floor + bw_part))
    return out


def step_arrays(sc: Any, batch: Any, ctx: Any, tokens_per_seq: Any, prefill: bool = False) -> dict[str, Any]:
    """Vectorised core: numpy arrays (broadcast) of batch (sequences, all dp ranks), context length and tokens per
    sequence -> dict of term/class arrays. For prefill, ctx is the context before the chunk."""
    mdl = model_for(sc)
    o, eff = mdl.ops, sc.efficiency
    b_all = np.asarray(batch, dtype=float)
    t = np.asarray(tokens_per_seq, dtype=float)
    L = np.asarray(ctx, dtype=float)
    b = np.ceil(b_all / sc.dp - 1e-9)  # the busiest attention-DP rank sets the pace
    t_rank, t_glob = b * t, b_all * t
    bw = o.bw_bytes_per_s
    # dense GEMMs (attention projections, dense MLP, shared experts, lm_head)
    m_gemm = np.full_like(t_rank, o.gemm_weight_bytes / (bw * eff.gemm_bw_eff))
    c_gemm = t_rank * o.gemm_s_per_token_peak / eff.compute_eff
    # routed experts
    if o.n_moe_layers:
        touched = o.experts_per_gpu * (1.0 - (1.0 - o.top_k / o.n_experts) ** t_glob)
        moe_bytes = o.n_moe_layers * touched * o.expert_bytes
    else:
        moe_bytes = np.zeros_like(t_rank)
    m_moe = moe_bytes / (bw * eff.moe_bw_eff)
    c_moe = t_glob * o.expert_s_per_token_peak / eff.moe_compute_eff
    # attention over the KV cache / recurrent state
    L_eff = L + t if prefill else L + t - 1.0
    kv_bytes = b * (sum(ct.bytes_per_token * ct.tokens(L_eff) for ct in o.ctx_terms) + o.state_bytes_per_seq)
    kv_bytes = kv_bytes + t_rank * o.kv_write_bytes_per_token
    L_q = L + (t + 1.0) / 2.0 if prefill else L_eff  # mean context a query token sees (causal within a chunk)
    attn_fl = t_rank * sum((ct.flops_prefill if prefill else ct.flops_decode) * ct.tokens(L_q) for ct in o.ctx_terms)
    m_attn = kv_bytes / (bw * eff.attn_bw_eff)
    c_attn = attn_fl / (o.attn_peak_flops * eff.attn_compute_eff)
    comm = _collectives(mdl, eff, t_rank, t_glob)
    comm_s = sum((v[2] for v in comm.values()), np.zeros_like(t_rank))
    # Prefill chunks run eagerly in vLLM/SGLang/TRT-LLM (graphs are captured for decode batch sizes only).
    per_kernel = eff.kernel_overhead_s if (sc.cuda_graphs and not prefill) else eff.launch_overhead_s
    kern_s = np.full_like(t_rank, o.kernels_per_step * per_kernel)
    cpu_s = eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * b_all
    w = np.where(m_gemm >= c_gemm, m_gemm, 0.0) + np.where(m_moe >= c_moe, m_moe, 0.0)
    kv = np.where(m_attn >= c_attn, m_attn, 0.0)
    comp = (np.where(m_gemm < c_gemm, c_gemm, 0.0) + np.where(m_moe < c_moe, c_moe, 0.0)
            + np.where(m_attn < c_attn, c_attn, 0.0))
    over = kern_s + cpu_s
    step = w + kv + comp + comm_s + over
    mem_peak = (o.gemm_weight_bytes + moe_bytes + kv_bytes) / bw
    fl_peak = (t_rank * o.gemm_s_per_token_peak + t_glob * o.expert_s_per_token_peak
               + attn_fl / o.attn_peak_flops)
    floor = np.maximum(mem_peak, fl_peak) + sum((v[3] for v in comm.values()), np.zeros_like(t_rank))
    return {
        "step": step, "weights": w, "kv": kv, "compute": comp, "communication": comm_s, "overhead": over,
        "gemm": np.maximum(m_gemm, c_gemm), "moe": np.maximum(m_moe, c_moe),
        "attention": np.maximum(m_attn, c_attn), "kernels": kern_s, "cpu": cpu_s,
        "floor": floor, "collectives": comm, "tokens": t_glob,
    }


def public_name(key: str) -> str:
    """Internal collective key -> the name printed (the lm_head logits gather is `gather_logits`)."""
    return "gather_logits" if key == hw.ALL_GATHER + ":logits" else key


def _to_prediction(a: dict[str, Any], batch: int, ctx: int, kind: str) -> StepPrediction:
    terms = {k: float(a[k]) for k in TERMS}
    colls = {
        public_name(k): CollectiveCost(int(v[0]), float(v[1]), float(v[2])) for k, v in a["collectives"].items()
    }
    classes = {
        "gemm": float(a["gemm"]), "moe": float(a["moe"]), "attention": float(a["attention"]),
        "communication": float(a["communication"]), "norm": float(a["kernels"]), "other": float(a["cpu"]),
    }
    return StepPrediction(
        step_time_s=float(a["step"]), terms_s=terms, dominant=max(terms, key=lambda k: terms[k]),
        collectives=colls, floor_s=float(a["floor"]), class_time_s=classes, batch=batch,
        tokens=int(round(float(a["tokens"]))), context_len=ctx, kind=kind,
    )


def decode_step(sc: Any, batch: int, context_len: int, tokens_per_seq: int = 1) -> StepPrediction:
    """One decode step of `batch` sequences (all dp ranks) at `context_len` tokens of context each.
    tokens_per_seq > 1 is a speculative verification of k+1 tokens per sequence."""
    if batch < 1 or context_len < 0 or tokens_per_seq < 1:
        from servescope.errors import ScenarioError

        raise ScenarioError(f"decode_step: batch={batch}, context_len={context_len}, tokens={tokens_per_seq}")
    return _to_prediction(step_arrays(sc, batch, context_len, tokens_per_seq), batch, context_len, "decode")


def prefill_step(sc: Any, tokens: int, batch: int = 1, context_len: int = 0) -> StepPrediction:
    """One prefill chunk of `tokens` tokens in total, split evenly over `batch` sequences that already hold
    `context_len` tokens of context each (chunked prefill continues after earlier chunks)."""
    if tokens < 1 or batch < 1 or context_len < 0:
        from servescope.errors import ScenarioError

        raise ScenarioError(f"prefill_step: tokens={tokens}, batch={batch}, context_len={context_len}")
    a = step_arrays(sc, batch, context_len, tokens / batch, prefill=True)
    return _to_prediction(a, batch, context_len, "prefill")
