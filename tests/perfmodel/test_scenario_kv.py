"""Scenario.with_ keeps the KV format consistent with the engine, as Scenario.build chose it."""

from __future__ import annotations

from servescope.perfmodel import Scenario
from servescope.specs.hardware import load_gpu
from servescope.specs.kv_cache import engine_kv
from servescope.specs.models import load_model


def test_changing_the_backend_rederives_the_engine_default_kv_format() -> None:
    # GLM-5 has DeepSeek sparse attention: vLLM allocates fp8 KV, SGLang bf16 below SM 10 (specs/kv_cache.py).
    sc = Scenario.build("zai-org/GLM-5", "h100_sxm", tp=8, backend="vllm", check_memory=False)
    sg = sc.with_(backend="sglang")
    want = engine_kv(load_model("zai-org/GLM-5"), "sglang", load_gpu("h100_sxm")).scheme
    assert sc.quant.kv.name == "fp8" and sg.quant.kv == want and want.name != "fp8"
    assert sg.with_(backend="vllm").quant.kv == sc.quant.kv  # and back


def test_an_explicit_kv_format_survives_a_backend_change() -> None:
    sc = Scenario.build("zai-org/GLM-5", "h100_sxm", tp=8, backend="vllm", kv_quant="fp8", check_memory=False)
    assert sc.with_(backend="sglang").quant.kv.name == "fp8"
