"""KV offload to a host tier (issue 29.4; simulate/offload.py): preempted requests' KV copied out and back over PCIe
instead of recomputed. Offload never adds GPU capacity, and every copy is priced: llama-3.1-8b holds 2 (K, V) · 32
layers · 8 KV heads · 128 dims · 2 bytes = 131,072 bytes per token on one GPU, 16 tokens a block, over the H100
SXM's 64 GB/s PCIe 5.0 link (specs/data/gpus/h100_sxm.toml pcie_bw)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario
from servescope.simulate import build_workload, draw_lengths, engine_for, simulate
from servescope.simulate.loop import simulate_raw
from servescope.simulate.offload import offload_for, parse_offload
from servescope.simulate.workload import Arrival

BASE = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=1024, osl=256)
BLOCK_S = 131_072 * 16 / 64e9  # seconds to copy one block one way


def test_block_copy_priced_from_the_spec() -> None:
    off = offload_for(BASE, 16, parse_offload("cpu:10"))
    assert off is not None
    assert off.s_per_block == pytest.approx(BLOCK_S, rel=1e-9)
    assert off.host_blocks == int(10e9 // (131_072 * 16))


@settings(max_examples=10, deadline=None)
@given(backend=st.sampled_from(["vllm", "sglang"]), n=st.integers(20, 80), conc=st.integers(8, 48),
       kv=st.integers(6000, 20000), size_gb=st.sampled_from([0.05, 1.0, 50.0]), seed=st.integers(0, 50))
def test_offload_never_adds_capacity_and_prices_every_copy(backend, n, conc, kv, size_gb, seed) -> None:
    sc = BASE.with_(backend=backend)
    eng = engine_for(sc)
    isl, osl = draw_lengths(n, sc.isl, sc.osl, 0.5, seed)
    wl = build_workload(Arrival("closed"), n, conc, isl, osl, seed)
    blocks = kv // eng.block_size_tokens
    plain = simulate_raw(sc, eng, wl, total_blocks=blocks)
    off = simulate_raw(sc, eng, wl, total_blocks=blocks, offload=offload_for(sc, 16, parse_offload(f"cpu:{size_gb}")))
    assert off.total_blocks == plain.total_blocks and off.step_kv_blocks.max() <= off.total_blocks
    assert off.swap_s == pytest.approx(off.swap_blocks * BLOCK_S, rel=1e-9, abs=1e-15)
    assert off.swap_blocks % 2 == 0  # every request finishes: each block copied out comes back
    if not plain.preemptions.sum():  # nothing preempted: nothing to copy, the same run
        assert off.swap_blocks == 0 and np.array_equal(off.finish_s, plain.finish_s)
    # recompute avoided: no more prefill tokens than without the tier
    assert off.prefill_tokens is not None and plain.prefill_tokens is not None
    assert off.prefill_tokens.sum() <= plain.prefill_tokens.sum()


def test_offload_is_said_and_recorded() -> None:
    res = simulate(BASE.with_(isl=2048, osl=512), "closed", 64, 200, kv_cache_tokens=40000,
                   kv_offload_bytes=parse_offload("cpu:100"))
    assert any("KV offload" in w for w in res.warnings)
    assert res.settings["kv_offload"]["pcie_bw_bytes_per_s"] == 64e9
    assert "pcie" in res.settings["kv_offload"]["pcie_bw_source"].lower()


@pytest.mark.parametrize("text", ["gpu:10", "cpu:0", "cpu:-1", "cpu:", "cpu:1e9"])
def test_bad_offload_refused(text: str) -> None:
    with pytest.raises(ScenarioError, match="--kv-offload"):
        parse_offload(text)
