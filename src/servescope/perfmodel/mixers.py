"""Costs of the token mixers that are neither dense GQA nor absorbed MLA decode: linear-attention / Mamba-2
recurrent layers, and MLA's context up-projection when a prefill chunk meets a cached context.

What it does: per-GPU constants for ops.py (`Ops.rec`, `Ops.mla_ctx_*`), from the model config and the layout.
What it does not: time anything (step.py applies rooflines and efficiencies), or price the DSA indexer (ops.py:
its keys and FLOPs are context terms like the attention's own).

Recurrent layers (Qwen3.5 gated delta-net, Nemotron-H Mamba-2), per layer, H = heads/tp on one GPU, each head
holding a state of dk × dv elements (gated delta-net: key dim × value dim; Mamba-2: d_state × head_dim), C the
scan's chunk length (models.GDN_CHUNK = 64 for gated delta-net, the config's `chunk_size` for Mamba-2):
  state bytes / seq / step   2 · state_elems · 4 B / tp   (fp32 state, conv state included, read once, written once)
  decode FLOPs / token       gated delta-net 9·H·dk·dv: u = S·k (2), S ← α(S − β·u·kᵀ) + β·v·kᵀ (5), o = S·q (2)
                             Mamba-2 5·H·dk·dv: h ← exp(dt·A)·h + dt·x·Bᵀ (3), y = h·C (2)
  prefill FLOPs / token      gated delta-net, chunked (FLA, as vLLM 0.19 runs it): per chunk A = K·Kᵀ, W = T·K,
                             U = T·V, Q·Kᵀ, (Q·Kᵀ)·V_new (C²·(6·dk + 4·dv)), the triangular solve T (2/3·C³),
                             V_new = U − W·S, Q·S, S += Kᵀ·V_new (6·C·dk·dv): per token
                             H·(6·dk·dv + C·(6·dk + 4·dv) + 2/3·C²)
                             Mamba-2 SSD: states Bᵀ·X and C·h (4·dk·dv), intra-chunk C·Bᵀ and its product with X
                             (2·C·(dk + dv)): per token H·(4·dk·dv + 2·C·(dk + dv))
  prefill bytes / token      gated delta-net: the per-chunk states h (bf16, `k.new_empty(B, NT, H, V, K)` in vLLM's
                             fla/ops/chunk_delta_h.py) written then read by chunk_fwd_o: 2 · H·dk·dv · 2 B / C
Assumptions: full tiles (causal masking saves no FLOPs inside a chunk); Mamba-2's B, C counted per head (groups
share them: an upper bound); the short conv1d (kernel 4) is left out (≈ 2·4 FLOPs per channel per token).

MLA context in a prefill chunk (vLLM 0.19 `MLACommonImpl._compute_prefill_context`,
vllm/model_executor/layers/attention/mla_attention.py L2447-2510): the cached latent of the L context tokens is
gathered and up-projected by kv_b_proj to per-head k_nope and v, then attended by the chunk's queries:
  FLOPs / context token / layer   2 · kv_lora · (nh/tp) · (nope + v)           (kv_b_proj GEMM, its weight dtype)
  bytes / context token / layer   2 · (nh/tp) · (nope + rope + v) · 2 B         (k and v written, then read; bf16)
Decode and speculative verification use the absorbed form instead (no up-projection; ops.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servescope.perfmodel.deployment import Deployment

STATE_BYTES = 4.0  # recurrent state kept in fp32
ACT_BYTES = 2.0  # bf16 activations / chunk states


@dataclass(frozen=True)
class Recurrent:
    """Per-GPU costs of all linear-attention / Mamba layers of a scenario (zeros when it has none)."""

    state_bytes_per_seq: float  # read + written per sequence per step
    flops_decode_per_token: float
    flops_prefill_per_token: float
    bytes_prefill_per_token: float  # chunk states written and read by the chunked scan


def recurrent(sc: Deployment) -> Recurrent:
    """The recurrent layers' costs (formulas in the module docstring)."""
    m = sc.model
    n_gdn, n_mamba = m.n_attn("linear"), m.n_attn("mamba")
    if not (n_gdn or n_mamba) or not m.linear_dims:
        return Recurrent(0.0, 0.0, 0.0, 0.0)
    heads, dk, dv, c = m.linear_dims
    h = heads / sc.tp
    state = 2.0 * (n_gdn + n_mamba) * m.linear_state_elems * STATE_BYTES / sc.tp
    if n_gdn:
        dec = 9.0 * h * dk * dv
        pf = h * (6.0 * dk * dv + c * (6.0 * dk + 4.0 * dv) + 2.0 / 3.0 * c * c)
        pf_bytes = 2.0 * h * dk * dv * ACT_BYTES / c
        return Recurrent(state, n_gdn * dec, n_gdn * pf, n_gdn * pf_bytes)
    dec = 5.0 * h * dk * dv
    pf = h * (4.0 * dk * dv + 2.0 * c * (dk + dv))
    return Recurrent(state, n_mamba * dec, n_mamba * pf, 0.0)


def mla_context_per_token(sc: Deployment) -> tuple[float, float]:
    """(FLOPs, bytes) per GPU per cached context token that one prefill chunk up-projects, over all MLA layers
    (0, 0 for other attention and for DeepSeek sparse attention, whose prefill attends only the top-k)."""
    m = sc.model
    if m.attention_kind != "mla" or m.index_topk:
        return 0.0, 0.0
    n = sum(1 for a in m.layer_attention if a in ("full", "sliding"))
    nh = m.n_heads / sc.tp
    flops = 2.0 * m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
    nbytes = 2.0 * nh * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * ACT_BYTES
    return n * flops, n * nbytes
