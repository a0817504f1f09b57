"""Dense GEMMs, decode attention and routed experts at aiconfigurator's measured per-op curves (perfmodel/gemm_shapes.py,
measured_ops.py, step.py). Expected values come from the model configs (raw JSON) and the curve files (raw JSON) read
here, not from the code under test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servescope.perfmodel import Efficiency, Scenario, decode_step, prefill_step
from servescope.perfmodel.gemm_shapes import dense_gemms
from servescope.perfmodel.measured_ops import MAX_CURVE_OVER_ROOFLINE, serving_gemm
from servescope.perfmodel.ranges import provenance
from servescope.perfmodel.step import measured_attention, moe_curve_over_roofline, step_parts

ROOT = Path(__file__).parents[2]
MODELS = ROOT / "src/servescope/specs/data/models"
CURVES = ROOT / "src/servescope/specs/data/opcurves"
ON = Efficiency(op_curves=1.0)
OFF = Efficiency(op_curves=0.0)


def _cfg(stem: str) -> dict:  # type: ignore[type-arg]
    return json.loads((MODELS / f"{stem}_config.json").read_text())


def _listed_params(sc: Scenario) -> float:
    return sum(g.n * g.k * g.count for g in dense_gemms(sc))


def test_gqa_inventory_is_the_configs_dense_weights_per_gpu() -> None:
    """Llama-3.1-70B at TP=4: every GEMM of every layer, from config.json (q, k, v, o, gate, up, down, lm_head)."""
    c = _cfg("meta-llama--Meta-Llama-3.1-70B")
    h, nh, nkv, inter, v, n = (c[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                              "intermediate_size", "vocab_size", "num_hidden_layers"))
    d, tp = h // nh, 4
    per_layer = h * (nh + 2 * nkv) * d / tp + nh * d * h / tp + 3 * h * inter / tp
    sc = Scenario.build("llama-3.1-70b", "h100_sxm", tp=tp, check_memory=False)
    assert _listed_params(sc) == pytest.approx(n * per_layer + v * h / tp, rel=1e-9)


def test_mla_inventory_is_the_configs_dense_weights_per_gpu() -> None:
    """DeepSeek-V3 at TP=8: MLA projections (q_a + kv_a replicated, q_b, kv_b, o), dense layers, shared experts,
    router, lm_head — from config.json."""
    c = _cfg("deepseek-ai--DeepSeek-V3")
    h, nh, tp = c["hidden_size"], c["num_attention_heads"], 8
    ql, kvl, rope, nope, vd = (c[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                             "v_head_dim"))
    n, dense = c["num_hidden_layers"], c["first_k_dense_replace"]
    attn = h * (ql + kvl + rope) + (ql * nh * (nope + rope) + kvl * nh * (nope + vd) + nh * vd * h) / tp
    shared = 3 * h * c["moe_intermediate_size"] * c["n_shared_experts"] / tp + h * c["n_routed_experts"]
    want = n * attn + dense * 3 * h * c["intermediate_size"] / tp + (n - dense) * shared + c["vocab_size"] * h / tp
    sc = Scenario.build("deepseek-v3", "h200_sxm", tp=tp, check_memory=False)
    assert _listed_params(sc) == pytest.approx(want, rel=1e-9)


def _raw_gemm_us(system: str, engine: str, dtype: str, n: int, k: int, m: int) -> float:
    doc = json.loads((CURVES / f"{system}.json").read_text())
    t = next(t for t in doc["tables"] if t["op"] == "gemm" and t["engine"] == engine)
    row = next(r for r in t["rows"] if r[0] == dtype and r[1] == n)
    return float(row[3][t["axes"]["k"].index(k)][t["axes"]["m"].index(m)])


def test_the_step_prices_a_listed_gemm_at_its_measured_time() -> None:
    """Llama-3.1-8B's gate_up (N = 2·14336 = 28672, K = 4096) has no curve of its own; its down projection
    (N = 4096, K = 14336) neither — but the lm_head-free difference of two steps isolates nothing. Instead: the step's
    curve part at M = 8 (a captured size) equals the sum over the GEMMs of count × max(time from the nearest
    measured (N, K) scaled by N·K, weight read at the datasheet BW), recomputed from the raw curve file."""
    sc = Scenario.build("llama-3.1-8b", "h200_sxm", efficiency=ON)
    doc = json.loads((CURVES / "h200_sxm.json").read_text())
    t = next(t for t in doc["tables"] if t["op"] == "gemm" and t["engine"] == "vllm")
    ns = sorted({r[1] for r in t["rows"] if r[0] == "bfloat16"})
    ks = t["axes"]["k"]
    bw = sc.gpu.hbm_bw_bytes_per_s
    want = 0.0
    for g in dense_gemms(sc):
        n0 = min(ns, key=lambda x: abs(np.log(g.n / x)))
        k0 = min(ks, key=lambda x: abs(np.log(g.k / x)))
        m = 8
        us = max(_raw_gemm_us("h200_sxm", "vllm", "bfloat16", n0, k0, mm) for mm in (1, 8))  # monotone in M
        want += g.count * max(us * 1e-6 * g.n * g.k / (n0 * k0), (g.n * g.k + m * (g.n + g.k)) * 2.0 / bw)
        assert m == 8
    p = step_parts(sc, 8, 1024, 1)
    assert float(np.ravel(p.gemm_op_s)[0]) == pytest.approx(want, rel=1e-6)
    assert float(np.ravel(p.mem_gemm_rest_s)[0]) == pytest.approx(0.0, abs=1e-12)  # every GEMM is bf16 with a curve


def test_a_quantized_gemm_far_slower_than_bf16_is_not_used() -> None:
    """vLLM's fp8-block GEMMs on B200 run several times its bf16 GEMMs at decode sizes (raw file): a fallback path.
    DeepSeek-R1 (fp8-block) on vLLM keeps those GEMMs on the roofline; on SGLang (within a fixed cost of bf16) the
    curve prices them."""
    n, k = 4096, 7168
    slow = [_raw_gemm_us("b200_sxm", "vllm", "fp8_block", n, k, m) for m in (1, 8, 64)]
    fast = [_raw_gemm_us("b200_sxm", "vllm", "bfloat16", n, k, m) for m in (1, 8, 64)]
    assert np.median(np.array(slow) / np.array(fast)) > MAX_CURVE_OVER_ROOFLINE
    sgl_slow = [_raw_gemm_us("b200_sxm", "sglang", "fp8_block", n, k, m) for m in (1, 8, 64)]
    sgl_fast = [_raw_gemm_us("b200_sxm", "sglang", "bfloat16", n, k, m) for m in (1, 8, 64)]
    assert np.median(np.array(sgl_slow) / np.array(sgl_fast)) < MAX_CURVE_OVER_ROOFLINE
    vllm = Scenario.build("deepseek-r1", "b200_sxm", tp=8, check_memory=False, efficiency=ON)
    fp8 = [g for g in dense_gemms(vllm) if g.weights.name == "fp8-block"]
    assert fp8 and not any(serving_gemm(vllm, g) for g in fp8)
    sgl = vllm.with_(backend="sglang")
    assert all(serving_gemm(sgl, g) for g in fp8)
    assert "off in this domain" in provenance(vllm)["dense_gemms"]  # B200 vLLM GEMMs: off by its dev rows
    # SGLang's fp8-block curves of the small projections run above 3× their priced roofline at M = 1 (kernel launch
    # and scale reads): refused for the deployment and said (issue 27); the rest are priced by their curve
    assert "refused" in provenance(sgl)["dense_gemms"]
    total = sum(g.count * g.params * g.weights.bytes_per_param for g in dense_gemms(sgl))
    bw = sgl.gpu.hbm_bw_bytes_per_s * sgl.gpu.hbm_bw_efficiency
    assert 0.0 < float(np.ravel(step_parts(sgl, 8, 1024, 1).mem_gemm_rest_s)[0]) < 0.5 * total / bw


def test_measured_gemms_never_beat_the_datasheet_read() -> None:
    """A curve measured on one L2-resident buffer can beat HBM (RTX PRO 6000, 128 MiB L2); the step does not."""
    sc = Scenario.build("llama-3.1-8b", "rtx_pro_6000_server", efficiency=ON)
    p = step_parts(sc, 1, 512, 1)
    read = sum(g.count * g.params * g.weights.bytes_per_param for g in dense_gemms(sc)) / sc.gpu.hbm_bw_bytes_per_s
    assert float(np.ravel(p.gemm_op_s)[0]) >= read * (1 - 1e-9)


def test_verify_never_costs_less_than_one_token() -> None:
    """More rows never cost less: GEMM curves are taken monotone in M (a measured dip is a tile choice)."""
    sc = Scenario.build("llama-3.1-8b", "h100_sxm", efficiency=ON)
    for b in (1, 4, 16, 32, 64, 128):
        assert decode_step(sc, b, 2048, 4).step_time_s >= decode_step(sc, b, 2048).step_time_s


def test_curve_kernels_leave_the_graph_overhead_not_the_eager_launches() -> None:
    """In a graph replay the kernels a curve prices carry their own cost; an eager prefill still launches each."""
    eff = ON.scaled(kernel_overhead_s=1e-6, launch_overhead_s=1e-5, cpu_overhead_s=0.0, cpu_overhead_per_seq_s=0.0)
    sc = Scenario.build("llama-3.1-8b", "h200_sxm", efficiency=eff)
    off = sc.with_(efficiency=eff.scaled(op_curves=0.0))
    p = step_parts(sc, 8, 1024, 1)
    covered = float(np.ravel(p.gemm_op_kernels + p.attn_op_kernels)[0])
    assert covered > 0
    assert decode_step(off, 8, 1024).terms_s["overhead"] - decode_step(sc, 8, 1024).terms_s["overhead"] == \
        pytest.approx(covered * 1e-6, rel=1e-9)
    assert prefill_step(sc, 1024).terms_s["overhead"] == pytest.approx(prefill_step(off, 1024).terms_s["overhead"])


def test_decode_attention_at_the_measured_curve() -> None:
    """Llama-3.1-8B on H200, vLLM, bf16 KV: 32 layers × the measured per-layer time at (batch, kv_len) on the grid
    (raw file; 32 query / 8 KV heads of 128), never below the KV read at the datasheet bandwidth."""
    doc = json.loads((CURVES / "h200_sxm.json").read_text())
    t = next(t for t in doc["tables"] if t["op"] == "generation_attention" and t["engine"] == "vllm")
    row = next(r for r in t["rows"] if r[:4] == ["bfloat16", 128, 32, 8])
    b, kv = 16, 4096
    us = row[5][t["axes"]["batch_size"].index(b)][t["axes"]["kv_len"].index(kv)]
    sc = Scenario.build("llama-3.1-8b", "h200_sxm", efficiency=ON)
    read = 32 * b * (2 * 8 * 128 * 2.0 * kv + 4 * 32 * 128) / sc.gpu.hbm_bw_bytes_per_s  # KV, q and output
    p = step_parts(sc, b, kv, 1)
    assert float(np.ravel(p.attn_op_s)[0]) == pytest.approx(max(32 * us * 1e-6, read), rel=1e-6)
    assert measured_attention(sc) and not measured_attention(sc.with_(efficiency=OFF))


def test_a_gpu_without_curves_says_which_terms_are_datasheet() -> None:
    sc = Scenario.build("llama-3.1-70b", "a100_sxm", tp=4, check_memory=False)
    prov = provenance(sc)
    assert prov["dense_gemms"].startswith("dense GEMMs: datasheet roofline") and "a100_sxm" in prov["dense_gemms"]
    assert prov["attention"].startswith("decode attention: datasheet roofline")
    p = step_parts(sc, 8, 1024, 1)
    assert float(np.ravel(p.gemm_op_s)[0]) == 0.0 and float(np.ravel(p.attn_op_s)[0]) == 0.0


def test_a_reference_moe_path_is_refused_and_said() -> None:
    """gpt-oss-120b on B200 with TRT-LLM 1.2 at TP=1: its MXFP4 MoE curve (1.3.0rc20, moe_torch_flow) runs far above
    its roofline; Kimi-K2.5's Marlin W4A16 curve on the RTX PRO 6000 within it."""
    gpt = Scenario.build("gpt-oss-120b", "b200_sxm", backend="trtllm", check_memory=False, engine_version="1.3.0rc20",
                         efficiency=ON.scaled(moe_curve=1.0))
    assert moe_curve_over_roofline(gpt) > MAX_CURVE_OVER_ROOFLINE
    assert float(np.ravel(step_parts(gpt, 8, 1024, 1).moe_curve_s)[0]) == 0.0
    assert "reference path" in provenance(gpt)["experts"]
    kimi = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16",
                          efficiency=ON.scaled(moe_curve=1.0))
    assert moe_curve_over_roofline(kimi) <= MAX_CURVE_OVER_ROOFLINE
    assert float(np.ravel(step_parts(kimi, 8, 1024, 1).moe_curve_s)[0]) > 0.0


def test_a_verify_block_on_the_mla_prefill_path() -> None:
    """vLLM's Triton MLA (sm_120, sm_8x) runs a verify block of 1 + k tokens through its MLA prefill path
    (specs/data/engines/vllm.toml, vllm#51065): the cached context is up-projected (kv_b_proj: 2·kv_lora·nh·(nope + v) FLOPs
    and the k/v it materialises per cached token and layer, from config.json), the decode kernel's curve does not
    price it, and the attention block's kernels launch outside the graph. Not on Hopper (FlashMLA), not on SGLang,
    not for a plain decode step."""
    c = _cfg("moonshotai--Kimi-K2.5")
    c = c.get("text_config", c)
    tp, b, ctx = 8, 32, 1024
    nh, kvl, nope, rope, v, n = (c[k] for k in ("num_attention_heads", "kv_lora_rank", "qk_nope_head_dim",
                                               "qk_rope_head_dim", "v_head_dim", "num_hidden_layers"))
    up_bytes = n * 2 * (nh / tp) * (nope + rope + v) * 2.0
    box = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=tp, moe_quant="int4-w4a16", engine_version="0.16.0",
                         efficiency=ON)
    plain, verify = step_parts(box, b, ctx, 1), step_parts(box, b, ctx, 4)
    bw = box.gpu.hbm_bw_bytes_per_s * box.gpu.hbm_bw_efficiency
    extra = float(np.ravel(verify.mem_attn_s)[0] - plain.mem_attn_s.ravel()[0])
    kv_token = n * (kvl + rope) * box.quant.kv.bytes_per_param  # latent + rope per token, all layers
    # 3 more cached tokens read per sequence, 3 more tokens written per sequence, the up-projected context
    assert extra == pytest.approx((b * ctx * up_bytes + b * 3 * kv_token + 3 * b * kv_token) / bw, rel=1e-9)
    # vLLM has no MLA kernel table (issue 27: no other engine's stands in), so no decode curve prices either step
    assert float(np.ravel(verify.attn_op_s)[0]) == 0.0 == float(np.ravel(plain.attn_op_s)[0])
    assert float(np.ravel(verify.eager_kernels)[0]) > 0.0 == float(np.ravel(plain.eager_kernels)[0])
    for other in (box.with_(backend="sglang"), Scenario.build("kimi-k2.5", "h200_sxm", tp=tp, moe_quant="int4-w4a16",
                                                               engine_version="0.16.0", efficiency=ON)):
        p1, p4 = step_parts(other, b, ctx, 1), step_parts(other, b, ctx, 4)
        assert float(np.ravel(p4.eager_kernels)[0]) == 0.0
        assert float(np.ravel(p4.mem_attn_s)[0] - p1.mem_attn_s.ravel()[0]) < 0.01 * b * ctx * up_bytes / bw


def test_a_gpu_without_curves_is_priced_by_the_roofline_fit() -> None:
    """The fit's first stage (curves off) prices a GPU the curves do not cover; a covered GPU takes the staged fit."""
    import tomllib

    doc = tomllib.loads((ROOT / "src/servescope/specs/data/efficiency.toml").read_text())
    a100 = Scenario.build("llama-3.1-70b", "a100_sxm", tp=4, check_memory=False)
    h100 = Scenario.build("llama-3.1-70b", "h100_sxm", tp=4, check_memory=False)
    for name in ("cpu_overhead_s", "overlap_exposed_frac", "gemm_bw_eff", "attn_bw_eff"):
        assert getattr(a100.efficiency, name) == pytest.approx(doc["roofline"][name], rel=1e-6)
        assert getattr(h100.efficiency, name) == pytest.approx(doc["default"][name], rel=1e-6)
    assert a100.efficiency.op_curves == 0.0 and h100.efficiency.op_curves == 1.0


def test_prefill_attention_at_the_measured_curve_without_a_cached_prefix() -> None:
    """Llama-3.1-8B on H200, vLLM: a prompt of 1,024 tokens with nothing cached is 32 layers × the measured
    context-attention time at (batch 1, isl 1,024) — raw file; 32 query / 8 KV heads of 128, bf16 —; a later chunk
    (a cached prefix, which the curve does not measure) stays on the roofline."""
    doc = json.loads((CURVES / "h200_sxm.json").read_text())
    t = next(t for t in doc["tables"] if t["op"] == "context_attention" and t["engine"] == "vllm")
    row = next(r for r in t["rows"] if r[:4] == ["bfloat16", 128, 32, 8])
    us = row[5][t["axes"]["batch_size"].index(1)][t["axes"]["kv_len"].index(1024)]
    sc = Scenario.build("llama-3.1-8b", "h200_sxm", efficiency=ON)
    first = step_parts(sc, 1, 0, 1024, prefill=True)
    assert float(np.ravel(first.attn_op_s)[0]) == pytest.approx(32 * us * 1e-6, rel=1e-6)
    later = step_parts(sc, 1, 2048, 1024, prefill=True)
    assert float(np.ravel(later.attn_op_s)[0]) == 0.0
