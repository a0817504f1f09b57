"""The busiest attention-DP rank (dp_balance.py, hooked into step.py): limits, monotonicity, an independent Monte
Carlo of the rank-mean maximum, and the factor on the decode step's per-rank KV read and attention FLOPs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from servescope.perfmodel import Scenario
from servescope.perfmodel.dp_balance import attention_imbalance, context_cv
from servescope.perfmodel.step import model_for, step_parts

ISL, OSL = 1024, 1024


def _sc(dp: int, **kw: object) -> Scenario:
    return Scenario.build("deepseek-v3", "h200_sxm", dp=dp, ep=dp, quant="fp8", isl=ISL, osl=OSL,
                          check_memory=False, **kw)


def test_context_cv_is_the_uniform_spreads() -> None:
    ctx = np.random.default_rng(0).uniform(ISL, ISL + OSL, 1_000_000)
    assert context_cv(ISL, OSL) == pytest.approx(ctx.std() / ctx.mean(), rel=0.01)
    assert context_cv(ISL, OSL, decode_only=True) == 0.0


def test_factor_is_one_at_dp1_and_decode_only() -> None:
    n = np.array([1.0, 4.0, 64.0])
    assert np.all(attention_imbalance(1, n, context_cv(ISL, OSL)) == 1.0)
    assert np.all(attention_imbalance(8, n, context_cv(ISL, OSL, decode_only=True)) == 1.0)


def test_factor_falls_with_more_sequences_per_rank() -> None:
    f = attention_imbalance(8, np.array([1.0, 2.0, 4.0, 16.0, 64.0, 1024.0]), context_cv(ISL, OSL))
    assert np.all(f >= 1.0) and np.all(np.diff(f) < 0)


@pytest.mark.parametrize("n", [4, 16, 64])
def test_factor_matches_monte_carlo_max_rank_mean(n: int) -> None:
    """dp ranks of n sequences each, contexts uniform over [isl, isl + osl]: the expected maximum over the ranks of
    the rank's mean context, over the population mean, within 10 %."""
    dp, trials = 8, 20_000
    ctx = np.random.default_rng(n).uniform(ISL, ISL + OSL, (trials, dp, n))
    mc = ctx.mean(axis=2).max(axis=1).mean() / (ISL + OSL / 2)
    f = float(attention_imbalance(dp, n, context_cv(ISL, OSL)))
    assert f == pytest.approx(mc, rel=0.10)
    assert mc > 1.0


def test_decode_step_kv_and_attention_flops_of_the_busiest_rank() -> None:
    """dp = 8: the per-rank KV read and attention FLOPs are the factor times those of the same ranks without the
    context spread (decode-only: every sequence at the context given); the KV writes are not scaled."""
    batch, ctx = 64, ISL + OSL / 2
    sc = _sc(8)
    flat = replace(sc, decode_only=True)
    o = model_for(sc).ops
    n = math.ceil(batch / 8)
    cv = (OSL / math.sqrt(12)) / (ISL + OSL / 2)
    f = 1 + math.sqrt(2 * math.log(8) * (1 - 1 / 8)) * cv / math.sqrt(n)
    writes = n * o.kv_write_bytes_per_token
    spread, even = step_parts(sc, batch, ctx, 1), step_parts(flat, batch, ctx, 1)
    read_spread = float(spread.mem_attn_s) * o.bw_bytes_per_s - writes
    read_even = float(even.mem_attn_s) * o.bw_bytes_per_s - writes
    assert read_spread > read_even
    assert read_spread == pytest.approx(f * read_even, rel=1e-9)
    assert float(spread.comp_attn_s) == pytest.approx(f * float(even.comp_attn_s), rel=1e-9)


def test_prefill_and_dp1_unchanged() -> None:
    sc = _sc(8)
    flat = replace(sc, decode_only=True)
    a, b = step_parts(sc, 8, 0, 512, prefill=True), step_parts(flat, 8, 0, 512, prefill=True)
    assert float(a.mem_attn_s) == float(b.mem_attn_s) and float(a.comp_attn_s) == float(b.comp_attn_s)
    one = _sc(1)
    c, d = step_parts(one, 16, 1536, 1), step_parts(replace(one, decode_only=True), 16, 1536, 1)
    assert float(c.mem_attn_s) == float(d.mem_attn_s)
