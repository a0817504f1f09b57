"""The benchmark client behind validation rows, the engine KV budget per backend, and a scheduler stall (issue 8)."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario
from servescope.perfmodel.memory import (
    engine_kv_bytes_per_gpu,
    usable_bytes_per_gpu,
    weights_bytes_per_gpu,
)
from servescope.simulate import engine_for, simulate
from servescope.simulate.loop import kv_blocks
from servescope.validation.simulate_rows import _wave_mean, simulate_row

SMALL = dict(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=256, osl=64)


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(**SMALL)


def test_engine_kv_budget_formulas(sc: Scenario) -> None:
    hbm, rest = float(sc.gpu.hbm_bytes), sc.efficiency.reserve_bytes + weights_bytes_per_gpu(sc)
    assert engine_kv_bytes_per_gpu(sc) == usable_bytes_per_gpu(sc)
    assert engine_kv_bytes_per_gpu(sc, 0.9, "total") == pytest.approx(0.9 * hbm - rest)
    assert engine_kv_bytes_per_gpu(sc, 0.9, "free") == pytest.approx(0.9 * (hbm - rest))
    # "free" leaves 10% of what the weights leave; "total" 10% of the card: the free share is the larger pool here
    assert engine_kv_bytes_per_gpu(sc, 0.9, "free") > engine_kv_bytes_per_gpu(sc, 0.9, "total")
    with pytest.raises(ScenarioError, match="known: total, free"):
        engine_kv_bytes_per_gpu(sc, 0.9, "spare")


def test_backend_kv_pools_follow_their_sourced_shares(sc: Scenario) -> None:
    """The simulation sizes its KV pool as the closed-form model does, from the engine version's sourced share
    (specs/data/engines/, memory section): vLLM 0.9 of total memory, TRT-LLM 0.9 of what weights and activations
    leave."""
    from servescope.specs.engines import engine

    v, t = engine("vllm", "0.16.0").memory, engine("trtllm", "1.2.0").memory
    assert v.kv_mem_fraction == 0.9 and v.kv_mem_of == "total" and "gpu_memory_utilization" in v.sources["kv_mem_fraction"]
    assert t.kv_mem_fraction == 0.9 and t.kv_mem_of == "free" and "free_gpu_memory_fraction" in \
        t.sources["kv_mem_fraction"]
    per_token = 2 * 8 * 128 * 2 * 32  # Llama-3.1-8B bf16 KV: 2 (K,V) · 8 kv heads · 128 · 2 B · 32 layers
    hbm, rest = float(sc.gpu.hbm_bytes), sc.efficiency.reserve_bytes + weights_bytes_per_gpu(sc)
    for backend, pool in (("vllm", 0.9 * hbm - rest), ("trtllm", 0.9 * (hbm - rest))):
        s2 = sc.with_(backend=backend)
        cfg = engine_for(s2)
        assert usable_bytes_per_gpu(s2) == pytest.approx(pool)
        assert kv_blocks(s2, cfg) == int(pool / per_token / cfg.block_size_tokens)
    with pytest.raises(ScenarioError, match="kv_mem_fraction"):
        engine_for(sc).with_(kv_mem_fraction=1.5)


def test_wave_mean_weighs_first_and_last_waves_once() -> None:
    c, waves = 4, 10
    x = np.concatenate([np.full(c, 10.0), np.full(3 * c, 1.0), np.full(c, 4.0)])
    assert _wave_mean(x, c, waves) == pytest.approx((10.0 + 4.0 + 8 * 1.0) / 10)
    assert _wave_mean(x, c, 5) == pytest.approx((10.0 + 4.0 + 3 * 1.0) / 5)  # exactly the plain mean


def test_simulate_row_client_draws_lengths_and_reweights(sc: Scenario) -> None:
    full = simulate_row(sc, 16, waves=10, max_prompts=10_000)
    assert full.requests == 160 and full.settings["simulated_prompts"] == 160
    short = simulate_row(sc, 16, waves=10, max_prompts=48)
    assert short.requests == 48 and short.settings["num_prompts"] == 160
    assert short.ttft.mean_s == pytest.approx(full.ttft.mean_s, rel=0.25)
    fixed = simulate_row(sc, 16, waves=10, range_ratio=1.0, max_prompts=10_000)
    assert fixed.settings["simulated_prompts"] == 160
    # drawn lengths desynchronise the closed loop: the fixed-length run keeps its lock-step waves of prefills
    assert full.ttft.mean_s < fixed.ttft.mean_s


def test_sglang_prefill_first_does_not_stall_when_a_chunk_finds_no_kv() -> None:
    """A request mid-prefill whose next chunk finds no free KV must let the decode batch run (it frees KV);
    before the fix the scheduler returned an empty step forever."""
    sg = Scenario.build(**{**SMALL, "isl": 3000, "osl": 200, "backend": "sglang"})
    eng = engine_for(sg, max_num_batched_tokens=1024)
    res = simulate(sg, "closed", concurrency=8, num_prompts=40, range_ratio=0.8, engine=eng, kv_cache_tokens=9000)
    assert res.requests == 40 and np.isfinite(res.ttft.p99_s)
