"""perfmodel.ep_balance: the busiest GPU's distinct routed experts under expert parallelism.

Expected values are computed here independently: by hand for a tiny case, by an exact big-integer count of the
placements (a dynamic programme over GPUs, not the module's float polynomial powers), and by Monte Carlo with a fixed
seed (tokens routed top-k at random, uniform and skewed, experts on GPUs in contiguous blocks)."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from servescope.perfmodel.ep_balance import (
    busiest_experts,
    busiest_factor,
    busiest_table,
    uniform_imbalance,
)
from servescope.perfmodel.routing import Routing
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_parts


def _exact_busiest(n_experts: int, ep: int, k: int) -> Fraction:
    """E[max per-GPU count] when k of n_experts slots (ep blocks of m) are drawn uniformly: Σ_x P(max > x), with
    the number of draws putting ≤ x in every block counted by a DP over blocks (big integers)."""
    m = n_experts // ep
    total = math.comb(n_experts, k)
    out = Fraction(0)
    for x in range(m):
        ways = [1] + [0] * k  # ways[j]: subsets of j slots in the blocks so far, ≤ x in each
        for _ in range(ep):
            ways = [sum(ways[j - a] * math.comb(m, a) for a in range(min(x, j) + 1)) for j in range(k + 1)]
        out += 1 - Fraction(ways[k], total)
    return out


def test_tiny_case_by_hand() -> None:
    # 4 experts, 2 GPUs of 2, 2 touched: both on one GPU with probability 2/6 (max 2), else max 1 -> 4/3
    assert busiest_table(4, 2)[2] == pytest.approx(4.0 / 3.0, rel=1e-12)
    assert busiest_table(4, 2)[0] == 0.0
    assert busiest_table(4, 2)[4] == pytest.approx(2.0, rel=1e-12)


@pytest.mark.parametrize(("n_experts", "ep", "k"), [(384, 8, 8), (384, 8, 100), (256, 8, 37), (256, 32, 20)])
def test_table_against_exact_count(n_experts: int, ep: int, k: int) -> None:
    assert busiest_table(n_experts, ep)[k] == pytest.approx(float(_exact_busiest(n_experts, ep, k)), rel=1e-9)


def _mc_busiest(n_experts: int, top_k: int, ep: int, tokens: int, weights: list[float] | None,
                trials: int, seed: int) -> tuple[float, float]:
    """(mean distinct experts touched on the busiest GPU, mean distinct touched in all) by simulation: each token
    draws top_k distinct experts (uniformly, or by `weights`), expert i sits on GPU i // (E/ep)."""
    rng = random.Random(seed)
    m = n_experts // ep
    ids = list(range(n_experts))
    busiest = touched = 0
    for _ in range(trials):
        hit: set[int] = set()
        for _ in range(tokens):
            if weights is None:
                hit.update(rng.sample(ids, top_k))
            else:
                chosen: set[int] = set()
                while len(chosen) < top_k:
                    chosen.add(rng.choices(ids, weights)[0])
                hit |= chosen
        per_gpu = [0] * ep
        for e in hit:
            per_gpu[e // m] += 1
        busiest += max(per_gpu)
        touched += len(hit)
    return busiest / trials, touched / trials


@pytest.mark.parametrize(("tokens", "expected_factor_range"), [(1, (2.4, 2.7)), (4, (1.5, 1.9)), (64, (1.0, 1.2))])
def test_uniform_routing_against_monte_carlo(tokens: int, expected_factor_range: tuple[float, float]) -> None:
    """Kimi-like top-8 of 384 on 8 GPUs: at one token some GPU gets ~2.6 of the 8, at 64 tokens the busiest is
    near the mean."""
    sim_busiest, _ = _mc_busiest(384, 8, 8, tokens, None, trials=3000, seed=11)
    k_mean = 384 * (1 - (1 - 8 / 384) ** tokens)  # expected distinct experts, uniform routing
    assert float(busiest_experts(384, 8, k_mean)) == pytest.approx(sim_busiest, rel=0.03)
    factor = uniform_imbalance(384, 8, 8, tokens)
    assert factor == pytest.approx(sim_busiest / (k_mean / 8), rel=0.03)
    lo, hi = expected_factor_range
    assert lo < factor < hi


def test_skewed_routing_against_monte_carlo() -> None:
    """Hot experts at arbitrary ids (a shuffled power law): the formula at the simulated mean distinct count holds
    whatever the skew (the touched set lands on uniformly random slots)."""
    rng = random.Random(5)
    weights = [1.0 / (i + 1) ** 1.2 for i in range(256)]
    rng.shuffle(weights)
    sim_busiest, sim_touched = _mc_busiest(256, 8, 8, 16, weights, trials=2000, seed=3)
    assert float(busiest_experts(256, 8, sim_touched)) == pytest.approx(sim_busiest, rel=0.03)


def test_no_imbalance_without_expert_parallelism() -> None:
    """ep = 1: every GPU holds a slice of every expert, so it reads all K touched (factor 1)."""
    assert float(busiest_experts(384, 1, 7.5)) == 7.5
    assert float(busiest_factor(384, 1, 7.5)) == 1.0
    assert uniform_imbalance(384, 8, 1, 1) == 1.0
    assert uniform_imbalance(384, 8, 8, 100_000) == pytest.approx(1.0, abs=1e-9)


def test_factor_falls_with_tokens() -> None:
    f = [uniform_imbalance(256, 8, 8, t) for t in (1, 2, 8, 32, 128, 1024)]
    assert all(a > b for a, b in zip(f, f[1:], strict=False))
    assert f[0] > 2.0 and f[-1] < 1.01


def test_step_model_reads_the_busiest_gpus_experts() -> None:
    """DeepSeek-V3 on 8 H200, uniform routing, batch 1 decode: the routed-expert bytes under EP8 over those under
    TP8 (every GPU an eighth of each touched expert) = the busiest GPU's whole experts over K/8, from the exact
    count at K = 8 (one token, 8 distinct experts)."""
    base = Scenario.build("deepseek-v3", "h200_sxm", tp=8)
    uni = replace(base, routing=Routing("uniform"))
    ep8 = replace(uni.with_(ep=8), routing=Routing("uniform"))
    one = step_parts(uni, 1, 1024, 1)
    eight = step_parts(ep8, 1, 1024, 1)
    ratio = float(np.ravel(eight.mem_moe_s)[0]) / float(np.ravel(one.mem_moe_s)[0])
    assert ratio == pytest.approx(float(_exact_busiest(256, 8, 8)) / (8 / 8), rel=1e-6)
    assert 2.4 < ratio < 2.7
