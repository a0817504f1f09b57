"""The records of a model's architecture: `ModelSpec` (layer layout, head and expert sizes, derived KV/state
sizes) and its `ParamCounts` (parameters per part, whole model).
Does not: read or parse a config (specs.model_config parses one, specs.models finds and reads it); both records
are re-exported by specs.models, where callers import them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servescope.specs import quant as q


@dataclass(frozen=True)
class ParamCounts:
    """Parameters per part, whole model (all layers). `routed_experts` counts every expert."""

    attention: float
    attention_replicated: float  # part of `attention` every TP rank holds whole (MLA q_a/kv_a, indexer)
    dense_mlp: float
    routed_experts: float
    shared_experts: float
    embedding: float
    lm_head: float
    other: float  # norms
    mtp: float  # next-token-prediction layers (not in `total`)
    per_expert: float  # one routed expert of one layer: 3·h·moe_inter
    router: float = 0.0  # MoE router (gate) weights, h·E per MoE layer: read every step, replicated on every rank
    vision: float = 0.0  # vision tower + projector of a multimodal checkpoint (memory only, not in `total`)

    @property
    def total(self) -> float:
        return (
            self.attention + self.dense_mlp + self.routed_experts + self.shared_experts
            + self.embedding + self.lm_head + self.other + self.router
        )


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers of one model; counts in elements, sizes derived. Frozen, hashable."""

    name: str
    source: str
    model_type: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    attention_kind: str  # "gqa" | "mla" | "v4"
    layer_attention: tuple[str, ...]  # per layer: full | sliding | linear | mamba | none
    layer_mlp: tuple[str, ...]  # per layer: dense | moe | none
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    top_k: int
    shared_intermediate_size: int  # total over shared experts (0 if none)
    sliding_window: int
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    n_mtp_layers: int = 0
    linear_state_elems: int = 0  # recurrent state per linear/mamba layer per sequence (fp32 elements)
    # (heads, state rows, state columns, scan chunk) of a linear/mamba layer: gated delta-net (value heads, key dim,
    # value dim, 64) or Mamba-2 (heads, d_state, head_dim, chunk_size); () when the model has none
    linear_dims: tuple[int, ...] = ()
    v4_compress: tuple[int, ...] = ()  # DeepSeek-V4 compress ratio per layer (0 = sliding only)
    params: ParamCounts = field(default=None)  # type: ignore[assignment]
    native_quant: q.QuantConfig = field(default=None)  # type: ignore[assignment]

    # --- derived counts -------------------------------------------------------------------------
    @property
    def n_moe_layers(self) -> int:
        return sum(1 for m in self.layer_mlp if m == "moe")

    @property
    def n_dense_layers(self) -> int:
        return sum(1 for m in self.layer_mlp if m == "dense")

    def n_attn(self, kind: str) -> int:
        return sum(1 for a in self.layer_attention if a == kind)

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def active_params(self) -> float:
        """Parameters touched per token (top-k routed experts, all else), lm_head included, embedding not."""
        p = self.params
        routed = self.n_moe_layers * self.top_k * p.per_expert
        return p.attention + p.dense_mlp + routed + p.shared_experts + p.lm_head + p.other

    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements one token stores in one full-attention layer, whole model (before TP split)."""
        if self.attention_kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.attention_kind == "v4":
            return self.head_dim  # one shared KV head (MQA-like latent)
        return 2 * self.n_kv_heads * self.head_dim

    def __repr__(self) -> str:
        return f"ModelSpec({self.name!r}: {self.model_type}, {self.n_layers} layers; {self.source!r})"
