"""The step terms added for issue 7 item 3, each against independent arithmetic on a bundled real config.json (read
here with stdlib json, not servescope's parser) plus a limit or monotonic property:
DSA indexer, linear-attention recurrent layers, MLA context up-projection in a chunked prefill, multi-token-query
attention (speculative verify), the engines' MoE dispatch path under attention-DP + EP, the engine's KV dtype."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servescope.perfmodel import Efficiency, Scenario, decode_step, prefill_step
from servescope.perfmodel.moe_host import routing_s_per_moe_layer
from servescope.perfmodel.ops import achieved_bw_bytes_per_s, kernel_counts
from servescope.perfmodel.step import step_parts
from servescope.specs.hardware import load_gpu
from servescope.specs.kv_cache import engine_kv
from servescope.specs.models import load_model

MODELS = Path(__file__).parents[2] / "src/servescope/specs/data/models"
# Round efficiencies so each term's roofline is easy to redo by hand.
EFF = Efficiency(gemm_bw_eff=1.0, moe_bw_eff=1.0, attn_bw_eff=0.5, compute_eff=0.5, moe_compute_eff=0.5,
                 attn_compute_eff=0.25, kernel_overhead_s=0.0, launch_overhead_s=0.0, cpu_overhead_s=0.0,
                 cpu_overhead_per_seq_s=0.0, op_curves=0.0)  # the roofline, by hand (curves: test_measured_curves.py)


def _cfg(stem: str) -> dict[str, Any]:
    c: dict[str, Any] = json.loads((MODELS / f"{stem}_config.json").read_text())
    return c.get("text_config", c)


def _sc(model: str, gpu: str = "h200_sxm", **kw: Any) -> Scenario:
    return Scenario.build(model, gpu, efficiency=EFF, check_memory=False, **kw)


# --- DeepSeek sparse-attention indexer ---------------------------------------------------------------------------
def test_indexer_term_decode_and_prefill_match_hand_arithmetic() -> None:
    c = _cfg("zai-org--GLM-5")
    n, ih, idim = c["num_hidden_layers"], c["index_n_heads"], c["index_head_dim"]
    g = load_gpu("h200_sxm")
    bw, fp8 = achieved_bw_bytes_per_s(g), g.flops_per_s["fp8"]
    sc = _sc("glm-5", tp=8, quant="fp8", kv_quant="fp8")
    batch, ctx = 32, 8000
    bytes_ = batch * n * (idim + 4) * ctx  # fp8 keys + fp32 scale per context token, per layer
    flops = batch * n * 2 * ih * idim * ctx  # one query token per sequence scores every context token
    want = max(bytes_ / (bw * EFF.attn_bw_eff), flops / (fp8 * EFF.attn_compute_eff))
    assert decode_step(sc, batch, ctx).terms_s["indexer"] == pytest.approx(want, rel=1e-9)
    t = 4096  # prefill from an empty context: the causal mean context of a query is (t + 1) / 2
    pf_flops = t * n * 2 * ih * idim * (t + 1) / 2
    pf_bytes = n * (idim + 4) * t
    want_pf = max(pf_bytes / (bw * EFF.attn_bw_eff), pf_flops / (fp8 * EFF.attn_compute_eff))
    assert prefill_step(sc, t).terms_s["indexer"] == pytest.approx(want_pf, rel=1e-9)


def test_indexer_grows_with_context_and_is_absent_without_dsa() -> None:
    sc = _sc("glm-5", tp=8, quant="fp8", kv_quant="fp8")
    times = [decode_step(sc, 16, L).terms_s["indexer"] for L in (1000, 4000, 16000, 64000)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))
    assert times[-1] / times[0] == pytest.approx(64.0, rel=1e-6)  # linear in context: the indexer is not capped
    dense = decode_step(_sc("deepseek-v3", tp=8, quant="fp8", kv_quant="fp8"), 16, 64000)
    assert dense.terms_s["indexer"] == 0.0
    s = decode_step(sc, 16, 64000)
    assert sum(s.terms_s.values()) == pytest.approx(s.step_time_s, rel=1e-12)


# --- linear attention (Qwen3.5 gated delta-net) ----------------------------------------------------------------------
def test_recurrent_term_matches_hand_arithmetic() -> None:
    c = _cfg("Qwen--Qwen3.5-397B-A17B")
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, kern = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    n_lin = sum(1 for x in c["layer_types"] if x == "linear_attention")
    tp = 4
    state = nv * dk * dv + (2 * nk * dk + nv * dv) * (kern - 1)  # recurrent + conv state, fp32
    g = load_gpu("h200_sxm")
    bw, bf16 = achieved_bw_bytes_per_s(g), g.flops_per_s["bf16"]
    sc = _sc("qwen3.5-397b-a17b", tp=tp, quant="fp8", kv_quant="fp8")
    batch = 64
    dec_bytes = batch * 2 * n_lin * state * 4 / tp
    dec_flops = batch * n_lin * 9 * (nv / tp) * dk * dv
    want = max(dec_bytes / (bw * EFF.attn_bw_eff), dec_flops / (bf16 * EFF.attn_compute_eff))
    assert decode_step(sc, batch, 3000).terms_s["recurrent"] == pytest.approx(want, rel=1e-9)
    t, C = 8192, 64
    pf_flops = t * n_lin * (nv / tp) * (6 * dk * dv + C * (6 * dk + 4 * dv) + 2 / 3 * C * C)
    pf_bytes = 2 * n_lin * state * 4 / tp + t * n_lin * 2 * (nv / tp) * dk * dv * 2 / C
    want_pf = max(pf_bytes / (bw * EFF.attn_bw_eff), pf_flops / (bf16 * EFF.attn_compute_eff))
    assert prefill_step(sc, t).terms_s["recurrent"] == pytest.approx(want_pf, rel=1e-9)


def test_recurrent_decode_cost_does_not_grow_with_context() -> None:
    sc = _sc("qwen3.5-397b-a17b", tp=4, quant="fp8", kv_quant="fp8")
    short, long = (decode_step(sc, 32, L).terms_s["recurrent"] for L in (100, 100_000))
    assert short == long > 0.0  # a fixed-size state per sequence
    assert decode_step(sc, 64, 100).terms_s["recurrent"] == pytest.approx(2 * short, rel=1e-9)  # per sequence
    assert decode_step(_sc("llama-3.1-8b"), 32, 1000).terms_s["recurrent"] == 0.0


# --- MLA: context up-projection when a prefill chunk meets a cached context ----------------------------------------
def test_mla_chunked_prefill_context_upprojection() -> None:
    c = _cfg("deepseek-ai--DeepSeek-V3")
    n, nh, kvl = c["num_hidden_layers"], c["num_attention_heads"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    tp, t, L = 8, 2048, 30000
    sc = _sc("deepseek-v3", tp=tp, quant="bf16", kv_quant="bf16")
    g = load_gpu("h200_sxm")
    bw, bf16 = achieved_bw_bytes_per_s(g), g.flops_per_s["bf16"]
    a, b = step_parts(sc, 1, 0, t, prefill=True), step_parts(sc, 1, L, t, prefill=True)
    up_flops = L * n * 2 * kvl * (nh / tp) * (nope + v)  # kv_b_proj over the cached latent
    attn_flops = t * n * 2 * (nh / tp) * (nope + rope + v) * L  # the chunk's queries over L more context tokens
    assert float(b.comp_attn_s - a.comp_attn_s) == pytest.approx((up_flops + attn_flops) / bf16, rel=1e-9)
    assert float(b.comp_gemm_s) == float(a.comp_gemm_s)
    latent = L * n * (kvl + rope) * 2  # the cached latent read once
    kv_mat = L * n * 2 * (nh / tp) * (nope + rope + v) * 2  # per-head k and v written, then read
    assert float(b.mem_attn_s - a.mem_attn_s) == pytest.approx((latent + kv_mat) / bw, rel=1e-9)
    # Decode and verification use the absorbed form: no up-projection, GEMM time independent of the context.
    assert float(step_parts(sc, 4, L, 2).comp_gemm_s) == float(step_parts(sc, 4, 0, 2).comp_gemm_s)


def test_chunked_prefill_costs_more_with_more_cached_context() -> None:
    sc = _sc("deepseek-v3", tp=8, quant="fp8", kv_quant="fp8")
    times = [prefill_step(sc, 2048, context_len=L).step_time_s for L in (0, 8000, 32000, 128000)]
    assert all(x < y for x, y in zip(times, times[1:], strict=False))


# --- multi-token queries (speculative verification) -----------------------------------------------------------------
def test_verify_attention_flops_are_q_len_times_context() -> None:
    c = _cfg("meta-llama--Meta-Llama-3.1-8B")
    n, nh = c["num_hidden_layers"], c["num_attention_heads"]
    d = c["hidden_size"] // nh
    g = load_gpu("h200_sxm")
    sc = _sc("llama-3.1-8b")
    batch, L = 8, 4000
    for t in (1, 2, 4, 8):
        flops = batch * t * n * 4 * nh * d * (L + (t - 1) / 2)  # query i sees L + i context tokens (causal)
        got = float(step_parts(sc, batch, L, t).comp_attn_s)
        assert got == pytest.approx(flops / g.flops_per_s["bf16"], rel=1e-9)
    # KV is read once per sequence whatever the number of query tokens: memory grows only by the new tokens.
    m1, m4 = (float(step_parts(sc, batch, L, t).mem_attn_s) for t in (1, 4))
    per_token = n * 2 * c["num_key_value_heads"] * d * 2  # bf16 K and V, one token, all layers
    assert (m4 - m1) * achieved_bw_bytes_per_s(g) == pytest.approx(batch * 2 * 3 * per_token, rel=1e-9)


# --- expert-parallel dispatch under attention-DP -------------------------------------------------------------------
def test_moe_dispatch_path_follows_the_engine_default() -> None:
    c = _cfg("deepseek-ai--DeepSeek-V3")
    n_moe = c["num_hidden_layers"] - c["first_k_dense_replace"]
    k, h = c["num_experts_per_tok"], c["hidden_size"]
    batch = 64
    trt = decode_step(_sc("deepseek-v3", dp=8, ep=8, quant="fp8", backend="trtllm"), batch, 2000)
    a2a = trt.collectives["all_to_all"]
    assert a2a.calls_per_step == 2 * n_moe  # dispatch + combine per MoE layer
    assert a2a.bytes_per_call == pytest.approx(batch / 8 * k * h * 2)  # per-rank send buffer, bf16
    for backend in ("vllm", "sglang"):  # all_gather + reduce_scatter of every DP rank's tokens (module sources)
        s = decode_step(_sc("deepseek-v3", dp=8, ep=8, quant="fp8", backend=backend), batch, 2000)
        assert "all_to_all" not in s.collectives
        assert s.collectives["all_gather"].calls_per_step == n_moe
        assert s.collectives["reduce_scatter"].bytes_per_call == pytest.approx(batch * h * 2)
    tp_ep = decode_step(_sc("deepseek-v3", tp=8, ep=8, quant="fp8", backend="trtllm"), batch, 2000)
    assert "all_to_all" not in tp_ep.collectives  # without attention-DP the MoE output is all-reduced


def test_all_to_all_time_grows_with_batch() -> None:
    sc = _sc("deepseek-v3", dp=8, ep=8, quant="fp8", backend="trtllm")
    times = [decode_step(sc, b, 2000).collectives["all_to_all"].time_s for b in (8, 64, 512, 4096)]
    assert all(x <= y for x, y in zip(times, times[1:], strict=False)) and times[-1] > times[0]


# --- the KV format the engine allocates --------------------------------------------------------------------------
def test_engine_kv_dtype_per_checkpoint_and_backend() -> None:
    h200, b200 = load_gpu("h200_sxm"), load_gpu("b200_sxm")
    hq = json.loads((MODELS / "nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json").read_text())
    assert hq["quantization"]["kv_cache_quant_algo"] == "FP8"  # what the rule reads
    nv = load_model("nvidia/DeepSeek-V3.1-NVFP4")
    assert engine_kv(nv, "sglang", h200).scheme.name == "fp8"
    assert engine_kv(nv, "trtllm", h200).scheme.name == "fp8"
    assert engine_kv(nv, "vllm", h200).scheme.name == "bf16"  # modelopt kv_cache_quant_algo sets no kv_cache_scheme
    kimi_q = json.loads((MODELS / "moonshotai--Kimi-K2.5_config.json").read_text())["text_config"]
    assert kimi_q["quantization_config"]["kv_cache_scheme"] is None
    kimi = load_model("kimi-k2.5")
    assert {engine_kv(kimi, be, h200).scheme.name for be in ("vllm", "sglang", "trtllm")} == {"bf16"}
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    assert _cfg("deepseek-ai--DeepSeek-V3.2")["index_topk"] > 0
    assert engine_kv(v32, "vllm", h200).scheme.name == "fp8"
    assert engine_kv(v32, "sglang", h200).scheme.name == "bf16"  # NSA default below SM 10
    assert engine_kv(v32, "sglang", b200).scheme.name == "fp8"


def test_scenario_takes_the_engine_kv_unless_told() -> None:
    auto = _sc("deepseek-ai/DeepSeek-V3.2", tp=8, quant="fp8", backend="vllm")
    assert auto.quant.kv.name == "fp8"
    told = _sc("deepseek-ai/DeepSeek-V3.2", tp=8, quant="fp8", backend="vllm", kv_quant="bf16")
    assert told.quant.kv.name == "bf16"
    # fp8 KV halves the latent bytes a decode step reads and writes; the indexer keys it writes are fp8 either way.
    kv8, kv16 = (float(np.ravel(step_parts(s, 32, 1000, 1).mem_attn_s)[0]) for s in (auto, told))
    c = _cfg("deepseek-ai--DeepSeek-V3.2")
    idx_write = 32 * c["num_hidden_layers"] * (c["index_head_dim"] + 4)
    bw = achieved_bw_bytes_per_s(load_gpu("h200_sxm"))
    assert kv8 == pytest.approx(kv16 / 2 + idx_write / 2 / bw, rel=1e-9)


def test_indexer_kernels_are_counted_per_dsa_layer() -> None:
    c = _cfg("zai-org--GLM-5")
    n, dense = c["num_hidden_layers"], c["first_k_dense_replace"]
    moe = n - dense
    shared = 1 if c["n_shared_experts"] else 0
    k = kernel_counts()  # kernels per layer part counted in traces (specs/data/kernel_counts.toml)
    mla = k["attention"] + k["mla_extra"]  # GLM-5 and DeepSeek-V3 attention is MLA
    want = round(k["step"] + mla * n + k["dense_mlp"] * dense + (k["moe"] + k["shared_expert"] * shared) * moe)
    want += 9 * n  # + 9 indexer kernels per layer
    eff = EFF.scaled(kernel_overhead_s=1e-6)
    sc = Scenario.build("glm-5", "h200_sxm", tp=8, quant="fp8", kv_quant="fp8", efficiency=eff, check_memory=False)
    route = routing_s_per_moe_layer("nvidia")  # + the MoE routing kernels of a graphed step (moe_host.py)
    assert decode_step(sc, 4, 1000).terms_s["overhead"] == pytest.approx(want * 1e-6 + moe * route, rel=1e-12)
    v3 = Scenario.build("deepseek-v3", "h200_sxm", tp=8, quant="fp8", kv_quant="fp8", efficiency=eff,
                        check_memory=False)
    c3 = _cfg("deepseek-ai--DeepSeek-V3")
    moe3 = c3["num_hidden_layers"] - c3["first_k_dense_replace"]
    want3 = round(k["step"] + mla * c3["num_hidden_layers"] + k["dense_mlp"] * c3["first_k_dense_replace"]
                  + (k["moe"] + k["shared_expert"]) * moe3)
    assert decode_step(v3, 4, 1000).terms_s["overhead"] == pytest.approx(want3 * 1e-6 + moe3 * route, rel=1e-12)


# --- logits only where a token is sampled ------------------------------------------------------------------------
def test_prefill_pays_the_lm_head_once_per_sequence_decode_once_per_token() -> None:
    """Engines compute logits for the last token of each sequence in a prefill chunk (vLLM V1 logits_indices), for
    every token in decode. The lm_head GEMM is 2·V·h/tp FLOPs per sampled token at the bf16 peak (lm_head bf16)."""
    c = _cfg("meta-llama--Meta-Llama-3.1-8B")
    sc = _sc("meta-llama/Llama-3.1-8B-Instruct", tp=2, cuda_graphs=False)
    peak = float(load_gpu("h200_sxm").flops_per_s["bf16"])
    lm_head_s = 2.0 * c["vocab_size"] * c["hidden_size"] / 2 / peak
    one = step_parts(sc, 1, 0, 4096, prefill=True).comp_gemm_s
    four = step_parts(sc, 4, 0, 1024, prefill=True).comp_gemm_s  # same tokens, four sequences: three more logits
    assert float(four - one) == pytest.approx(3 * lm_head_s, rel=1e-9)
    d1 = step_parts(sc, 1, 1000, 1).comp_gemm_s
    d2 = step_parts(sc, 2, 1000, 1).comp_gemm_s  # decode: one more token, one more logits row
    body_s = float(one - lm_head_s) / 4096
    assert float(d2 - d1) == pytest.approx(body_s + lm_head_s, rel=1e-9)
