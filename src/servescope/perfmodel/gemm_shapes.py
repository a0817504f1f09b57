"""The dense GEMMs of one forward step on one GPU, by shape: what a measured GEMM curve is looked up with.

What it does: `dense_gemms(sc)` lists each weight GEMM a token passes through on one GPU — its name, output width
N and reduction K after tensor-parallel sharding, the scheme of its weights, how many times a step runs it (layers),
its parameter count and whether it runs on the sampled tokens only (lm_head) — from the model's config:
  GQA attention   qkv  N = (nh/tp + 2·max(nkv/tp, 1))·d, K = h;   o_proj  N = h, K = nh·d/tp     (per attention layer)
  MLA attention   fused q_a + kv_a  N = q_lora + kv_lora + rope, K = h (replicated; vLLM fused_qkv_a_proj);
                  q_b  N = nh/tp·(nope + rope), K = q_lora;  kv_b (absorbed W_UK/W_UV batched GEMMs, the same
                  FLOPs)  N = nh/tp·(nope + v), K = kv_lora;  o_proj  N = h, K = nh·v/tp       (per MLA layer)
  dense MLP       gate_up  N = 2·inter/tp, K = h;  down  N = h, K = inter/tp                    (per dense layer)
  shared experts  the same with the shared intermediate size                                  (per MoE layer)
  router          N = E, K = h, bf16, replicated                                              (per MoE layer)
  lm_head         N = vocab/tp, K = h                                                         (sampled tokens)
Parameters per GEMM are N·K (biases and norms left out). What the list does not cover — linear-attention and Mamba
projections, DeepSeek-V4's low-rank attention, the sparse-attention indexer, Q/K norms — is the rest of
`ops.build_ops`' dense weights; step.py keeps that rest on the roofline (`covered_params` says how much is listed).
What it does not: time anything (measured_ops.py looks the shapes up) or list routed experts (priced per layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servescope.specs.quant import QuantScheme, scheme

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM of a step on one GPU: C[M, n] = A[M, k] · W[k, n], run `count` times a step."""

    name: str
    n: int
    k: int
    weights: QuantScheme
    count: int
    sampled_only: bool = False  # runs on the sampled tokens only (lm_head), not on every token of the step

    @property
    def params(self) -> float:
        """Weight elements of one call (N·K)."""
        return float(self.n * self.k)


def _mla(sc: Deployment, n_layers: int) -> list[Gemm]:
    m, tp, w = sc.model, sc.tp, sc.quant.attention
    nh = m.n_heads // tp
    rope, nope, v = m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim or m.qk_nope_head_dim
    h, ql, kvl = m.hidden_size, m.q_lora_rank, m.kv_lora_rank
    out = [Gemm("mla_qkv_a", ql + kvl + rope, h, w, n_layers)]
    out.append(Gemm("mla_q_b", nh * (nope + rope), ql, w, n_layers) if ql else
               Gemm("mla_q", nh * (nope + rope), h, w, n_layers))
    if ql == 0:  # no q down-projection: only the kv_a part is fused/replicated
        out[0] = Gemm("mla_kv_a", kvl + rope, h, w, n_layers)
    out.append(Gemm("mla_kv_b", nh * (nope + v), kvl, w, n_layers))
    out.append(Gemm("o_proj", h, nh * v, w, n_layers))
    return out


def _gqa(sc: Deployment, n_layers: int) -> list[Gemm]:
    m, tp, w = sc.model, sc.tp, sc.quant.attention
    d, h = m.head_dim, m.hidden_size
    q_heads, kv_heads = m.n_heads // tp, max(m.n_kv_heads // tp, 1)
    return [Gemm("qkv_proj", (q_heads + 2 * kv_heads) * d, h, w, n_layers),
            Gemm("o_proj", h, q_heads * d, w, n_layers)]


def _mlp(name: str, inter: int, h: int, tp: int, w: QuantScheme, count: int) -> list[Gemm]:
    i = inter // tp
    return [Gemm(f"{name}_gate_up", 2 * i, h, w, count), Gemm(f"{name}_down", h, i, w, count)] if i else []


def dense_gemms(sc: Deployment) -> tuple[Gemm, ...]:
    """The listed dense GEMMs of one step on one GPU (module docstring); step.py keeps them per scenario."""
    m, qc, tp = sc.model, sc.quant, sc.tp
    h = m.hidden_size
    out: list[Gemm] = []
    n_attn = sum(1 for a in m.layer_attention if a in ("full", "sliding"))
    if m.attention_kind == "gqa" and n_attn:
        out += _gqa(sc, n_attn)
    elif m.attention_kind == "mla" and n_attn and m.kv_lora_rank:
        out += _mla(sc, n_attn)
    n_dense = sum(1 for x in m.layer_mlp if x == "dense")
    if n_dense:
        out += _mlp("mlp", m.intermediate_size, h, tp, qc.dense_mlp, n_dense)
    if m.n_moe_layers:
        if m.shared_intermediate_size:
            out += _mlp("shared", m.shared_intermediate_size, h, tp, qc.shared_experts, m.n_moe_layers)
        out.append(Gemm("router", m.n_routed_experts, h, scheme("bf16"), m.n_moe_layers))
    out.append(Gemm("lm_head", m.vocab_size // tp, h, qc.lm_head, 1, sampled_only=True))
    return tuple(g for g in out if g.n > 0 and g.k > 0 and g.count > 0)

