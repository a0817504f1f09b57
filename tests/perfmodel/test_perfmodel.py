"""Performance model: step terms, collectives, memory, serving curve, errors, JSON document."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from servescope.errors import ScenarioError, UnknownName
from servescope.perfmodel import (
    TERMS,
    Efficiency,
    Scenario,
    decode_step,
    kv_bytes_per_seq,
    max_concurrency,
    predict,
    prefill_step,
    weights_bytes_per_gpu,
)
from servescope.perfmodel.routing import Routing
from servescope.report.model_doc import model_document
from servescope.specs.hardware import load_gpu

EFF = Efficiency(op_curves=0.0)  # fixed efficiencies on the roofline path (the measured per-op curves: test_measured_curves.py)


def _llama8b(**kw: object) -> Scenario:
    return Scenario.build("llama-3.1-8b", "h100_sxm", efficiency=EFF, **kw)  # type: ignore[arg-type]


def test_llama8b_batch1_weights_term_is_bytes_over_bandwidth() -> None:
    sc = _llama8b()
    s = decode_step(sc, batch=1, context_len=1024)
    gpu = load_gpu("h100_sxm")
    p = sc.model.params
    gemm_bytes = 2.0 * (p.attention + p.dense_mlp + p.lm_head)  # bf16, TP=1; embedding is a lookup
    achieved = gpu.hbm_bw_bytes_per_s * (gpu.hbm_bw_efficiency or 0.8)  # measured/sourced fraction of the datasheet
    assert s.terms_s["weights"] == pytest.approx(gemm_bytes / (achieved * EFF.gemm_bw_eff), rel=1e-9)
    assert s.dominant == "weights"
    assert s.collectives == {}  # TP=1: no all-reduce
    assert sum(s.terms_s.values()) == pytest.approx(s.step_time_s, rel=1e-12)
    assert s.floor_s < s.step_time_s


def test_kv_bytes_llama8b() -> None:
    sc = _llama8b()
    # 32 layers x K and V x 8 heads x 128 x 2 bytes per token
    assert kv_bytes_per_seq(sc, 1000) == 32 * 2 * 8 * 128 * 2 * 1000


def test_tp_all_reduce_count_and_message() -> None:
    sc = _llama8b(tp=4)
    s = decode_step(sc, batch=8, context_len=512)
    ar = s.collectives["all_reduce"]
    assert ar.calls_per_step == 2 * 32 + 1  # attention + MLP per layer, + vocab-parallel embedding
    assert ar.bytes_per_call == 8 * 4096 * 2
    assert "gather_logits" in s.collectives


def test_kimi_k25_int4_rtx_pro_tp8() -> None:
    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="bf16", moe_quant="int4-w4a16")
    s = decode_step(sc, batch=1, context_len=2048)
    ar = s.collectives["all_reduce"]
    assert ar.calls_per_step == 123  # 61 layers x 2 + embedding
    assert ar.bytes_per_call == 7168 * 2  # reference §3d: 14,336 B per token
    assert s.terms_s["communication"] > s.terms_s["compute"]
    points = predict(sc, [1, 2, 4, 8, 16, 32, 64, 128, 256])
    tpots = [p.tpot_s for p in points]
    toks = [p.output_tok_s for p in points]
    assert all(b >= a for a, b in zip(tpots, tpots[1:], strict=False))
    gains = [b / a for a, b in zip(toks, toks[1:], strict=False)]
    assert all(g >= 1.0 for g in gains)  # throughput never falls with concurrency ...
    assert gains[-1] < 1.2 and gains[-1] < gains[0]  # ... and saturates (per-doubling gain shrinks)
    assert points[-1].batch < 256  # memory caps the running batch


def test_kimi_k25_reference_case_tpot_and_all_reduces() -> None:
    """The reference case of issue 7: Kimi-K2.5 INT4 experts, 8x RTX PRO 6000 Server, vLLM TP=8, concurrency 1,
    measured 12.1 ms TPOT. The all-reduces run on the measured PCIe curve as measured (no fitted multiplier)."""
    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="bf16", moe_quant="int4-w4a16")
    p = predict(sc, [1])[0]
    ar = p.collectives["all_reduce"]
    assert ar.calls_per_step == 2 * 61 + 1  # attention + MLP per layer + the vocab-parallel embedding
    # 14 KiB per call (7168 x 2 B) on the measured 8-GPU curve: 24-28 us per call (reference §2a/§2f)
    assert 123 * 24e-6 < ar.time_s < 123 * 28e-6
    assert abs(p.tpot_s / 12.1e-3 - 1.0) <= 0.15


def test_prefill_long_prompt_is_compute_bound() -> None:
    s = prefill_step(_llama8b(), tokens=8192)
    assert s.dominant == "compute"
    assert s.kind == "prefill" and s.tokens == 8192


def test_speculative_verify_costs_more_than_one_token() -> None:
    sc = _llama8b()
    one = decode_step(sc, 32, 2048)
    four = decode_step(sc, 32, 2048, tokens_per_seq=4)
    assert four.step_time_s > one.step_time_s
    assert four.step_time_s < 4 * one.step_time_s  # weights are read once


def test_moe_experts_touched_grow_with_batch() -> None:
    """Uniform routing (--routing uniform): the expected distinct experts of 64 independent tokens."""
    sc = Scenario.build("qwen3-30b-a3b", "h100_sxm", efficiency=EFF).with_(routing=Routing("uniform"))
    w1 = decode_step(sc, 1, 512).class_time_s["moe"]
    w64 = decode_step(sc, 64, 512).class_time_s["moe"]
    m = sc.model
    # batch 1 reads top_k experts per layer; expected distinct experts at 64 tokens: E(1-(1-k/E)^64)
    e, k = m.n_routed_experts, m.top_k
    ratio = (e * (1 - (1 - k / e) ** 64)) / k
    assert w64 / w1 == pytest.approx(ratio, rel=1e-6)


def test_errors() -> None:
    with pytest.raises(ScenarioError, match="does not divide 32 attention heads"):
        _llama8b(tp=3)
    with pytest.raises(ScenarioError, match="does not fit"):
        Scenario.build("llama-3.1-70b", "rtx_4090")
    with pytest.raises(UnknownName):
        Scenario.build("llama-3.1-8b", "no-such-gpu")
    with pytest.raises(ScenarioError, match="ep="):
        _llama8b(ep=2)


def test_skewed_routing_touches_fewer_experts_as_the_published_loads_say() -> None:
    """Skewed routing (the default): loads are the quantiles of aiconfigurator's power law (alpha 1.2 for Qwen3 MoE,
    routing.toml) on [1, 0.8·T], recomputed here; an expert with expected load L is touched w.p. 1 − e^−L."""
    sc = Scenario.build("qwen3-30b-a3b", "h100_sxm", efficiency=EFF)
    w1 = decode_step(sc, 1, 512).class_time_s["moe"]
    w64 = decode_step(sc, 64, 512).class_time_s["moe"]
    e, k, t, a = sc.model.n_routed_experts, sc.model.top_k, 64, 1.2
    hi = 0.8 * t
    x = [((hi ** (1 - a) - 1.0) * ((i + 0.5) / e) + 1.0) ** (1 / (1 - a)) for i in range(e)]
    touched = sum(1 - math.exp(-t * k * xi / sum(x)) for xi in x)
    assert w64 / w1 == pytest.approx(touched / k, rel=1e-6)
    assert touched < e * (1 - (1 - k / e) ** t)  # fewer than uniform routing touches


def test_memory_and_max_concurrency() -> None:
    """vLLM's KV pool: 0.9 (CacheConfig.gpu_memory_utilization default, specs/data/engines/vllm.toml) of HBM − reserve − weights."""
    sc = _llama8b(isl=1024, osl=1024)
    gpu = load_gpu("h100_sxm")
    free = gpu.hbm_bytes * 0.9 - EFF.reserve_bytes - weights_bytes_per_gpu(sc)
    assert max_concurrency(sc) == int(free // (32 * 2 * 8 * 128 * 2 * 2048))


def test_more_gpus_fewer_weights_per_gpu() -> None:
    assert weights_bytes_per_gpu(_llama8b(tp=2)) < weights_bytes_per_gpu(_llama8b())


def test_model_document_schema() -> None:
    doc = model_document(predict(_llama8b(tp=2), [1, 8]))
    assert doc["schema"] == "servescope.model/1"
    p = doc["points"][1]
    assert set(p) >= {"concurrency", "tpot_ms", "ttft_ms", "output_tok_s", "memory_gb_per_gpu", "max_concurrency",
                      "dominant", "terms_ms", "collectives"}  # the contract; more keys extend it
    assert p["floor_ms"] <= p["decode_step_ms"] <= p["tpot_ms"] and p["queued"] is False
    assert set(p["terms_ms"]) == set(TERMS)
    assert sum(p["terms_ms"].values()) == pytest.approx(p["tpot_ms"], rel=1e-9)
    assert set(p["collectives"]["all_reduce"]) == {"calls_per_step", "bytes_per_call", "time_ms"}


def test_cuda_graphs_off_costs_more_overhead() -> None:
    on = decode_step(_llama8b(), 1, 128)
    off = decode_step(replace(_llama8b(), cuda_graphs=False), 1, 128)
    assert off.terms_s["overhead"] > on.terms_s["overhead"]


def test_vectorised_collective_curves_equal_specs_collectives() -> None:
    import numpy as np

    from servescope.perfmodel.hw import CollectiveTimer
    from servescope.specs.collectives import collective_time_s, load_collectives

    sizes = np.array([512.0, 14336.0, 1.0e5, 1.0e6, 3.0e7, 1.0e9])
    for gpu, n in (("rtx_pro_6000_server", 8), ("h200_sxm", 8), ("b200_sxm", 4)):
        curves = load_collectives(gpu, n)
        for coll in ("all_reduce", "all_to_all", "all_gather", "reduce_scatter"):
            mine = CollectiveTimer(curves, coll, n).time_s(sizes)
            backend = "vllm" if coll == "all_reduce" else "nccl"
            theirs = [collective_time_s(curves, coll, float(b), n, backend=backend) for b in sizes]
            assert np.allclose(mine, theirs, rtol=1e-9), (gpu, coll)


def test_every_bundled_model_predicts_on_8_b200() -> None:
    import math

    from servescope.specs.models import _aliases

    stems = sorted(set(_aliases()["aliases"].values()))
    for stem in stems:
        name = stem.replace("--", "/")
        try:
            sc = Scenario.build(name, "b200_sxm", tp=8, quant="native")
        except ScenarioError as e:  # a layout the model cannot take (heads not divisible by 8, too large)
            assert "does not" in str(e) or "neither" in str(e), (name, str(e))
            continue
        for p in predict(sc, [1, 64]):
            assert math.isfinite(p.tpot_s) and 0 < p.tpot_s < 10, name
            assert math.isfinite(p.ttft_s) and p.ttft_s > 0, name
            assert abs(sum(p.terms_s.values()) - p.tpot_s) < 1e-9 * p.tpot_s, name


def test_per_layer_prefill_costs_add_to_ttft_only_for_their_layer_kinds() -> None:
    # TTFT gains exactly (MLA layers) x mla_prefill_layer_s and (linear layers) x linear_prefill_layer_s; TPOT
    # does not move. Layer counts from the configs: DeepSeek-V3 61 MLA layers (num_hidden_layers); Qwen3.5-397B
    # 60 layers, every 4th full attention -> 45 gated delta-net layers; Llama-3.1-8B has neither.
    extra = EFF.scaled(mla_prefill_layer_s=1e-3, linear_prefill_layer_s=2e-3)
    for name, gpu, tp, n_mla, n_lin in (("deepseek-ai/DeepSeek-V3", "b200_sxm", 8, 61, 0),
                                        ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", 8, 0, 45),
                                        ("llama-3.1-8b", "h100_sxm", 1, 0, 0)):
        sc = Scenario.build(name, gpu, tp=tp, efficiency=EFF, isl=1024, osl=256)
        a, b = predict(sc, [1, 16]), predict(replace(sc, efficiency=extra), [1, 16])
        for p, q in zip(a, b, strict=True):
            assert q.ttft_s - p.ttft_s == pytest.approx(n_mla * 1e-3 + n_lin * 2e-3, abs=1e-9), name
            assert q.tpot_s == pytest.approx(p.tpot_s), name


def test_a_gpu_without_measured_serving_rows_says_so_and_its_range_is_wider() -> None:
    """MI300X (AMD) has no measured serving row: the point says so and its 80 % range is wider than on H100 SXM,
    whose rows are in the fit."""
    amd = predict(Scenario.build("llama-3.1-70b", "mi300x", tp=4), [1])[0]
    nv = predict(Scenario.build("llama-3.1-70b", "h100_sxm", tp=4), [1])[0]
    assert amd.provenance["case"] == "vendor_unseen" and "no measured serving rows" in amd.provenance["serving_rows"]
    assert nv.provenance["case"] == "system_seen"
    assert amd.tpot_high_s / amd.tpot_low_s > nv.tpot_high_s / nv.tpot_low_s
    assert nv.tpot_low_s < nv.tpot_s < nv.tpot_high_s
    doc = model_document([amd])["points"][0]
    assert doc["tpot_ms_low"] < doc["tpot_ms"] < doc["tpot_ms_high"] and doc["provenance"]["case"] == "vendor_unseen"


def test_provenance_is_the_same_on_every_call() -> None:
    """A cached provenance once dropped its CPU entry on the second call in one process."""
    from servescope.perfmodel.ranges import provenance

    sc = Scenario.build(model="llama-3.1-8b", gpu="h100", tp=1)
    first, second = provenance(sc), provenance(sc)
    assert first == second and "cpu_overhead" in second
    overlapped = sc.with_(overlap_scheduler=True)
    assert provenance(overlapped)["cpu_overhead"] != first["cpu_overhead"]  # the engine's entry is not cached


def test_scenario_build_defaults_to_the_checkpoints_own_scheme_as_the_cli() -> None:
    """Issue 20: `Scenario.build` defaults to quant="native" like the CLI, so gpt-oss-120b (MXFP4 experts) fits one
    H100 from Python as it does from `servescope model`; bf16 everywhere does not fit (~234 GB of weights)."""
    sc = Scenario.build("gpt-oss-120b", "h100_sxm")
    assert sc.quant.experts.name == "mxfp4"
    with pytest.raises(ScenarioError, match="does not fit"):
        Scenario.build("gpt-oss-120b", "h100_sxm", quant="bf16")
