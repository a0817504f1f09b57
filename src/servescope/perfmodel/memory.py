"""Memory per GPU: weights, KV cache (or recurrent state) per sequence, and the concurrency that fits.

Formulas (bytes, per GPU):
  weights   = [attention_sharded/tp + attention_replicated + dense_mlp/tp + shared/tp
               + routed_experts/(tp·dp) + (embedding + lm_head)/tp] · bytes/param, divided by pp
  KV / seq  = Σ full layers L·kv_token_layer + Σ sliding layers min(L, window)·kv_token_layer
              + linear/Mamba state (fp32, /tp), divided by pp; GQA kv_token_layer = 2·max(nkv/tp,1)·d·kvb,
              MLA (kv_lora+rope)·kvb (+ index keys for DSA) replicated on every TP rank
  usable    = the engine's KV pool, the same for model, plan, simulate and validate, with the memory share f of
              the engine version (specs.engines, memory section; Deployment.memory_share, or as set):
            "total": hbm · f − reserve_bytes − weights   (vLLM gpu_memory_utilization, default 0.9)
            "free":  f · (hbm − reserve_bytes − weights) (TRT-LLM free_gpu_memory_fraction, default 0.9)
            no sourced f (SGLang): hbm · 0.93 − reserve_bytes − weights (the generic share, efficiency.py)
  max_concurrency = dp · floor(usable / KV per seq at isl+osl);  kv_cache_tokens = dp · floor(usable / KV per token)
  weights include the vision tower of a multimodal checkpoint (loaded on every rank, bf16; specs.models)
What it does not: model paging granularity (vLLM blocks of 16 tokens round up by < 1 block per sequence),
prefix caching, or CPU offload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servescope.errors import ScenarioError
from servescope.units import GIGA

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment


def weights_bytes_per_gpu(sc: Deployment) -> float:
    p, qc, tp = sc.model.params, sc.quant, sc.tp
    attn = ((p.attention - p.attention_replicated) / tp + p.attention_replicated) * qc.attention.bytes_per_param
    dense = p.dense_mlp / tp * qc.dense_mlp.bytes_per_param
    shared = p.shared_experts / tp * qc.shared_experts.bytes_per_param
    experts = p.routed_experts / (tp * sc.dp) * qc.experts.bytes_per_param
    vocab = (p.embedding + p.lm_head) / tp * qc.lm_head.bytes_per_param + p.other * 2.0
    router = p.router * 2.0  # router (gate) weights: bf16, replicated on every rank
    return (attn + dense + shared + experts + vocab + router) / sc.pp + p.vision * 2.0


def kv_bytes_per_seq(sc: Deployment, context_len: float) -> float:
    """Cache bytes one sequence of `context_len` tokens holds on one GPU (capacity, not traffic)."""
    m, kvb, tp = sc.model, sc.quant.kv.bytes_per_param, sc.tp
    L = float(context_len)
    state = sum(1 for a in m.layer_attention if a in ("linear", "mamba")) * m.linear_state_elems * 4.0 / tp
    if m.attention_kind == "gqa":
        per = 2.0 * max(m.n_kv_heads // tp, 1) * m.head_dim * kvb
        full = m.n_attn("full") * L + m.n_attn("sliding") * min(L, float(m.sliding_window or L))
        return (per * full + state) / sc.pp
    if m.attention_kind == "mla":
        idx = (m.index_head_dim + 4.0) if m.index_n_heads else 0.0
        return m.n_layers * ((m.kv_lora_rank + m.qk_rope_head_dim) * kvb + idx) * L / sc.pp
    d = m.head_dim * kvb  # DeepSeek-V4: window + compressed caches (approximate, see ops._v4_terms)
    tot = 0.0
    for r in m.v4_compress or (0,) * m.n_layers:
        tot += d * min(L, float(m.sliding_window or 128)) + (d * L / r if r else 0.0)
        tot += (m.index_head_dim + 4.0) * L / r if r == 4 else 0.0
    return tot / sc.pp


def usable_bytes_per_gpu(sc: Deployment) -> float:
    """KV-cache bytes per GPU of the engine's pool at the engine version's memory share (module docstring)."""
    fraction, of, _ = sc.memory_share
    return engine_kv_bytes_per_gpu(sc, fraction, of)


def kv_cache_tokens(sc: Deployment) -> int:
    """Tokens the KV pool of one engine instance holds (what an engine log prints: vLLM 'GPU KV cache size')."""
    per = kv_bytes_per_seq(sc, 1.0)
    free = usable_bytes_per_gpu(sc)
    return int(sc.dp * (free // per)) if per > 0 and free > 0 else 0


def engine_kv_bytes_per_gpu(sc: Deployment, fraction: float | None = None, of: str = "total") -> float:
    """KV-cache bytes per GPU as an engine sizes its pool (module docstring: usable)."""
    if fraction is None:
        return usable_bytes_per_gpu(sc)
    rest = sc.efficiency.reserve_bytes + weights_bytes_per_gpu(sc)
    hbm = float(sc.gpu.hbm_bytes)
    if of == "free":
        return fraction * (hbm - rest)
    if of == "total":
        return hbm * fraction - rest
    raise ScenarioError(f"KV memory share of {of!r}; known: total, free")


def max_concurrency(sc: Deployment, context_len: float | None = None) -> int:
    """Sequences of `context_len` (default isl+osl) tokens whose cache fits, over all dp ranks."""
    L = float(sc.isl + sc.osl) if context_len is None else float(context_len)
    per = kv_bytes_per_seq(sc, L)
    free = usable_bytes_per_gpu(sc)
    if free <= 0:
        return 0
    return int(sc.dp * (free // per)) if per > 0 else 10**9


def check_fits(sc: Deployment) -> None:
    """ScenarioError when the weights alone leave no room (one line, in GB per GPU)."""
    w = weights_bytes_per_gpu(sc)
    if usable_bytes_per_gpu(sc) <= 0 or max_concurrency(sc) < 1:
        cap = float(sc.gpu.hbm_bytes) * sc.memory_share[0]
        raise ScenarioError(
            f"{sc.model.name} does not fit on {sc.gpu.name} at tp={sc.tp} ep={sc.ep} pp={sc.pp} dp={sc.dp}: "
            f"{w / GIGA:.1f} GB of weights per GPU + {sc.efficiency.reserve_bytes / GIGA:.1f} GB reserve "
            f"leaves no KV room for one {sc.isl + sc.osl}-token sequence in {cap / GIGA:.1f} GB usable"
        )
