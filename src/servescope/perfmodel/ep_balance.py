"""Expert-parallel load balance: the busiest GPU's routed-expert work when whole experts sit on `ep` GPUs.

Under expert parallelism (Deployment.ep > 1) each GPU holds m = E/ep whole experts (its 1/moe_tp slice of each) and
every MoE layer waits for its slowest GPU, so a step pays the busiest GPU's experts, not the mean GPU's. Two loads:

* Bytes (decode, memory-bound): the distinct experts the step touches on a GPU, each read once. With K distinct
  experts touched over all E (routing.touched_experts: skewed, uniform or measured loads) and experts placed without
  regard to their load (vLLM and SGLang put expert i on rank ⌊i·ep/E⌋, and which ids run hot is arbitrary; EPLB,
  which would move them, is opt-in in both: --enable-eplb, off by default, and not modelled), the touched experts
  sit on a uniformly random K-subset of the E slots. A GPU's count is then Hypergeometric(E, K, m) and the ep counts
  are jointly multivariate hypergeometric, exactly, whatever the skew. The busiest GPU's expected count is
      M(K) = Σ_{x=0}^{m−1} P(max_g X_g > x | K),   P(max_g X_g ≤ x | K) = [z^K] (Σ_{j≤x} C(m, j) z^j)^ep / C(E, K)
  (count the K-subsets that put at most x on every GPU; [z^K] (Σ_{j≤m} C(m, j) z^j)^ep = C(E, K): Vandermonde).
  Units: experts per GPU per MoE layer. `busiest_experts` evaluates it at K = K̄, the expected distinct experts
  (linear between the integers around K̄): K's own spread moves every GPU's count together, so it shifts the
  busiest GPU by its mean and adds no maximum. M(K)/(K/ep) is large at small K (one token, top-8 of 384 experts
  on 8 GPUs: 2.57 of the 8 on the busiest GPU, mean 1) and 1 when every expert is touched.
* Tokens (compute): `moe_imbalance`, the busiest rank's routed tokens over the mean (normal-tail approximation).

Not at ep = 1, and not for the TP-sharded part of an expert: there every GPU holds a 1/moe_tp slice of every
expert it serves (vLLM FusedMoE shards each expert's intermediate dimension over the TP ranks), so each touched
expert is read by every GPU of the group at the same share; M(K) = K at ep = 1. A hybrid layout (1 < ep < tp·dp)
balances the same way over its ep expert groups.
What it does not: pick the touched experts (routing.py) or price bytes and FLOPs (step_terms.py).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel.routing import Routing, touched_experts

Arr = np.ndarray
# C(E, K) must fit a float64 (C(1000, 500) ≈ 2.7e299); the bundled models have at most 896 routed experts.
MAX_EXPERTS = 1000


def _power(poly: Arr, n: int, size: int) -> Arr:
    """poly(z)^n truncated to degree size − 1 (repeated squaring), zero-padded to `size` coefficients."""
    out, base = np.ones(1), poly
    while n:
        if n & 1:
            out = np.convolve(out, base)[:size]
        n >>= 1
        if n:
            base = np.convolve(base, base)[:size]
    return np.pad(out, (0, size - len(out)))


@lru_cache(maxsize=64)
def busiest_table(n_experts: int, ep: int) -> Arr:
    """M(K) for K = 0 … E: the expected distinct touched experts on the busiest of ep GPUs holding E/ep whole
    experts each, given K distinct experts touched in all (module docstring; exact under load-blind placement)."""
    if n_experts > MAX_EXPERTS:
        raise ScenarioError(f"{n_experts} routed experts: the EP balance is priced for at most {MAX_EXPERTS}")
    if ep <= 1 or n_experts % ep:
        return np.arange(n_experts + 1, dtype=float)
    m, size = n_experts // ep, n_experts + 1
    comb = np.array([math.comb(m, j) for j in range(m + 1)], dtype=float)
    total = _power(comb, ep, size)  # C(E, K)
    busiest = np.zeros(size)
    for x in range(m):
        busiest += 1.0 - _power(comb[: x + 1], ep, size) / total
    busiest.flags.writeable = False
    return busiest


def busiest_experts(n_experts: int, ep: int, touched: Arr | float) -> Arr:
    """Distinct experts touched on the busiest GPU for `touched` = K̄ expected distinct experts over all E:
    M(K̄), linear between the integers around K̄ (module docstring); K̄ itself at ep = 1."""
    k: Arr = np.clip(np.asarray(touched, dtype=float), 0.0, float(n_experts))
    if ep <= 1 or n_experts <= 0:
        return k
    table = busiest_table(n_experts, ep)
    return np.asarray(np.interp(k, np.arange(n_experts + 1, dtype=float), table))


def busiest_touched(routing: Routing, model_type: str, n_experts: int, top_k: int, ep: int,
                    tokens: Arr | float) -> Arr:
    """Distinct experts one MoE layer touches on the busiest of ep GPUs for `tokens` routing draws: M(K̄) with
    K̄ = routing.touched_experts (the scenario's routing: skewed, uniform or measured). Experts per GPU per layer."""
    touched = touched_experts(routing, model_type, n_experts, top_k, np.asarray(tokens, dtype=float))
    return busiest_experts(n_experts, ep, touched)


def busiest_factor(n_experts: int, ep: int, touched: Arr | float) -> Arr:
    """The busiest GPU's distinct experts over the mean GPU's, M(K̄) / (K̄/ep) ≥ 1 (1 at ep = 1 or K̄ = 0)."""
    k = np.asarray(touched, dtype=float)
    if ep <= 1 or n_experts <= 0:
        return np.ones_like(k)
    mean = k / ep
    return np.asarray(np.where(mean > 0.0, busiest_experts(n_experts, ep, k) / np.maximum(mean, 1e-300), 1.0))


def uniform_imbalance(n_experts: int, top_k: int, ep: int, tokens: int) -> float:
    """busiest_factor under uniform routing: K̄ = E·(1 − (1 − k/E)^T) for T tokens of top-k."""
    if ep <= 1 or n_experts <= 0 or top_k <= 0:
        return 1.0
    touched = n_experts * (1.0 - (1.0 - min(top_k, n_experts) / n_experts) ** max(tokens, 1))
    return float(busiest_factor(n_experts, ep, touched))


def moe_imbalance(ep: int, routed: Arr, placement_cv: Arr | float = 0.0) -> Arr:
    """Busiest expert-parallel rank's routed-token load over the mean load: 1 + sqrt(2·ln(ep)·(1 − 1/ep)) · CV, the
    normal-tail expectation of the maximum of ep rank loads (balls-in-bins; Raab & Steger 1998), CV² = the sampling
    noise of `routed` = B·k assignments (ep/n) + the skew's placement variance (routing.placement_cv²), capped at ep
    (all on one rank). 1 for ep = 1 (every GPU holds a slice of every expert)."""
    n = np.maximum(np.asarray(routed, dtype=float), 1.0)
    if ep <= 1:
        return np.ones_like(n)
    cv = np.sqrt(ep / n + np.asarray(placement_cv, dtype=float) ** 2)
    f = 1.0 + np.sqrt(2.0 * np.log(ep) * (1.0 - 1.0 / ep)) * cv
    return np.asarray(np.minimum(f, float(ep)))
