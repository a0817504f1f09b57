"""The simulation's fast paths give the slow paths' numbers to the bit: simulate_headline (the grid sweep's simulated
tier) against `simulate`, without the pooled inter-token gaps; Stats.of's in-place percentiles against NumPy's on an
untouched copy; the decode attention read from the integer-context table against np.interp."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.perfmodel import Scenario
from servescope.simulate import engine_for, simulate, simulate_headline
from servescope.simulate.loop import simulate_raw
from servescope.simulate.metrics import Stats
from servescope.simulate.stepcost import StepCost
from servescope.simulate.workload import Arrival, build_workload, draw_lengths

CASES = [
    (dict(model="llama-3.1-8b", gpu="h100_sxm", isl=256, osl=64), 8),
    (dict(model="qwen3-30b-a3b", gpu="h100_sxm", tp=2, dp=4, ep=8, isl=1000, osl=300), 96),  # attention-DP, EP
    (dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16", isl=1024, osl=512), 256),
]


@pytest.mark.parametrize(("kw", "c"), CASES)
def test_headline_is_simulate_to_the_bit(kw: dict[str, object], c: int) -> None:
    sc = Scenario.build(**kw)  # type: ignore[arg-type]
    full, head = simulate(sc, "closed", c, 4 * c), simulate_headline(sc, "closed", c, 4 * c)
    for name in ("requests", "duration_s", "output_tok_s", "ttft", "tpot"):
        assert getattr(head, name) == getattr(full, name), name
    assert full.boundaries["itl"] == full.itl and full.boundaries["ttft"] == full.ttft


def test_raw_without_gaps_differs_only_in_the_gaps() -> None:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", isl=300, osl=50)
    cfg = engine_for(sc)
    isl, osl = draw_lengths(120, 300, 50, 0.5, 3)
    wl = build_workload(Arrival.parse("poisson:20"), 120, 16, isl, osl, 3)
    a, b = simulate_raw(sc, cfg, wl), simulate_raw(sc, cfg, wl, itl=False)
    assert len(a.itl_s) > 0 and len(b.itl_s) == 0
    for name in ("sent_s", "first_token_s", "finish_s", "step_t_s", "step_dur_s", "step_kv_blocks"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_stats_of_matches_numpy_on_a_copy() -> None:
    x = np.random.default_rng(1).exponential(1.0, 10_001)
    x[::97] = np.nan
    keep = x.copy()
    s = Stats.of(x)
    np.testing.assert_array_equal(x, keep)  # the caller's array is not reordered
    f = keep[np.isfinite(keep)]
    p = np.percentile(f, [50, 90, 99])
    assert (s.mean_s, s.p50_s, s.p90_s, s.p99_s) == (float(f.mean()), *map(float, p))


def test_integer_context_table_is_np_interp_to_the_bit() -> None:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", isl=3000, osl=500)
    cost = StepCost(sc, engine_for(sc), 8193, 3600)
    rng = np.random.default_rng(4)
    ctx = rng.integers(1, 3500, 700).astype(float)
    np.testing.assert_array_equal(cost._attn1_at(ctx), np.interp(ctx, cost.grid, cost.attn1))
    for k in (1, 37, 600):  # 600: past the strided rows (a window view)
        slow = np.interp((ctx[:, None] + np.arange(k)[None, :]).ravel(), cost.grid, cost.attn1).reshape(len(ctx), k)
        np.testing.assert_array_equal(cost._attn1_run(ctx, k), slow.sum(axis=0))
    half = ctx + 0.5  # not whole tokens: interpolated as before
    np.testing.assert_array_equal(cost._attn1_at(half), np.interp(half, cost.grid, cost.attn1))
    assert cost._whole(half, 1) is None and cost._whole(np.array([cost.grid[-1] + 5.0]), 1) is None


@pytest.mark.parametrize("kw", [
    dict(model="llama-3.1-8b", gpu="h100_sxm"),
    dict(model="qwen3-30b-a3b", gpu="h100_sxm", tp=2, dp=4, ep=8),
    dict(model="deepseek-v3", gpu="h200", dp=8, ep=8),
    dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16"),
    dict(model="qwen3-30b-a3b", gpu="h100_sxm", tp=4, cuda_graphs=False),
])
def test_block_tables_are_the_one_call_tables_to_the_bit(kw: dict[str, object]) -> None:
    """token_tables prices 512 step sizes per call: the same values as one step_arrays call over every size."""
    from servescope.perfmodel.step import step_arrays
    from servescope.simulate.token_tables import TokenTables

    sc = Scenario.build(**kw)  # type: ignore[arg-type]
    top, dp = 1300, max(1, sc.dp)
    seqs = np.maximum(np.arange(0, top + 1, dtype=float), 1.0)
    dec, pf = step_arrays(sc, seqs, 0, 1), step_arrays(sc, dp, 0, seqs / dp, prefill=True)

    def tok(a: dict[str, np.ndarray]) -> np.ndarray:
        return sum(np.asarray(a[k], dtype=float) for k in ("gemm", "moe", "communication", "kernels"))  # type: ignore[return-value]

    lazy = TokenTables(sc, dp, top)
    assert lazy.dec(700) == tok(dec)[700] and lazy.kern_pf(3) == np.asarray(pf["kernels"], dtype=float)[3]
    got = lazy.whole()
    np.testing.assert_array_equal(got[0], tok(dec))
    np.testing.assert_array_equal(got[1], tok(pf))
    np.testing.assert_array_equal(got[2], np.asarray(pf["kernels"], dtype=float))
    lazy.dec_scale = 1.17
    assert lazy.dec(1299) == (tok(dec) * 1.17)[1299]
