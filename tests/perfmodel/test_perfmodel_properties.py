"""Hypothesis properties of the performance model (DESIGN habit 8)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.perfmodel import Efficiency, Scenario, decode_step, kv_bytes_per_seq, prefill_step

_SCENARIOS = {
    "llama8b_h100_tp1": Scenario.build("llama-3.1-8b", "h100_sxm", efficiency=Efficiency()),
    "llama70b_h100_tp4": Scenario.build("llama-3.1-70b", "h100_sxm", tp=4, efficiency=Efficiency()),
    "qwen30b_b200_tp2": Scenario.build("qwen3-30b-a3b", "b200_sxm", tp=2, efficiency=Efficiency()),
    "dsv3_h200_tp8": Scenario.build("deepseek-v3", "h200_sxm", tp=8, quant="fp8-block", efficiency=Efficiency()),
    "gptoss_h100_dp2_ep2": Scenario.build("gpt-oss-120b", "h100_sxm", dp=2, ep=2, quant="bf16",
                                          moe_quant="mxfp4", efficiency=Efficiency()),
    "kimi_rtx_tp8": Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16",
                                   efficiency=Efficiency()),
}
names = st.sampled_from(sorted(_SCENARIOS))
batches = st.integers(min_value=1, max_value=512)
contexts = st.integers(min_value=0, max_value=32768)


@settings(max_examples=60, deadline=None)
@given(names, batches, contexts, st.integers(min_value=1, max_value=5))
def test_terms_add_up_to_the_step(name: str, batch: int, ctx: int, k: int) -> None:
    s = decode_step(_SCENARIOS[name], batch, ctx, tokens_per_seq=k)
    assert abs(sum(s.terms_s.values()) - s.step_time_s) <= 1e-12 * s.step_time_s
    assert abs(sum(s.class_time_s.values()) - s.step_time_s) <= 1e-9 * s.step_time_s
    assert all(v >= 0 for v in s.terms_s.values())
    assert s.floor_s <= s.step_time_s


@settings(max_examples=40, deadline=None)
@given(names, batches, contexts, st.floats(min_value=1.01, max_value=4.0), st.booleans())
def test_more_bandwidth_never_slows_a_step(name: str, batch: int, ctx: int, f: float, bus: bool) -> None:
    sc = _SCENARIOS[name]
    before = decode_step(sc, batch, ctx).step_time_s
    if bus:
        faster = replace(sc, efficiency=sc.efficiency.scaled(collective_bw_scale=sc.efficiency.collective_bw_scale * f))
    else:
        # a measured per-op curve belongs to the GPU it was measured on: a spec with more bandwidth keeps the curve
        # but moves its 3× roofline bound (a refusal can flip, issue 27), so this property is the datasheet's
        sc = replace(sc, efficiency=sc.efficiency.scaled(op_curves=0.0))
        before = decode_step(sc, batch, ctx).step_time_s
        faster = replace(sc, gpu=replace(sc.gpu, hbm_bw_bytes_per_s=sc.gpu.hbm_bw_bytes_per_s * f))
    assert decode_step(faster, batch, ctx).step_time_s <= before * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(batches, contexts)
def test_tp1_has_no_all_reduce(batch: int, ctx: int) -> None:
    for name in ("llama8b_h100_tp1", "gptoss_h100_dp2_ep2"):
        s = decode_step(_SCENARIOS[name], batch, ctx)
        assert "all_reduce" not in s.collectives


@settings(max_examples=40, deadline=None)
@given(names, contexts, st.integers(min_value=1, max_value=4096))
def test_memory_grows_with_context(name: str, ctx: int, extra: int) -> None:
    sc = _SCENARIOS[name]
    assert kv_bytes_per_seq(sc, ctx + extra) >= kv_bytes_per_seq(sc, ctx)
    assert kv_bytes_per_seq(sc, ctx + 4096) > kv_bytes_per_seq(sc, ctx) or sc.model.sliding_window


@settings(max_examples=30, deadline=None)
@given(names, st.integers(min_value=1, max_value=16384), st.integers(min_value=0, max_value=8192))
def test_prefill_terms_add_up_and_grow_with_tokens(name: str, tokens: int, ctx: int) -> None:
    sc = _SCENARIOS[name]
    s = prefill_step(sc, tokens, context_len=ctx)
    assert abs(sum(s.terms_s.values()) - s.step_time_s) <= 1e-12 * s.step_time_s
    assert prefill_step(sc, tokens + 256, context_len=ctx).step_time_s >= s.step_time_s
