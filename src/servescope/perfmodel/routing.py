"""Expert routing as traffic routes it: distinct routed experts one step touches, per GPU, under a skewed load.

Formula (per MoE layer; E experts, top-k, T tokens routed in the step, data/routing.toml for the skew):
    loads  L_i = T·k · x_i / Σx,  x_i = the (i − 0.5)/E quantile of a power law of exponent α on [1, 0.8·T]
           (T·k > E) or [0.01, 2] (T·k ≤ E) — aiconfigurator's MoE load generator, under which its measured MoE
           kernels were timed; α per model family from its published estimates (1.01 DeepSeek-V3/R1, 1.2 Qwen3)
    touched = Σ_i (1 − e^(−L_i)), at least min(k, E)   (an expert with expected load L gets ≥ 1 token w.p. 1 − e^−L)
    uniform routing: E · (1 − (1 − k/E)^T) (every token picks k of E at random)
    a measured histogram (--routing FILE): L_i = T·k · its share of expert i
Per GPU: touched · (E/ep)/E (experts spread evenly over ep ranks). The tokens of different sequences route
independently; the t verified tokens of one sequence (speculative decoding) count as 1 + (t − 1)·(1 − ρ) draws,
ρ = the measured adjacent-token expert reuse (routing.toml [correlation], COHERE-SD: 4 tokens ≈ 2.5× one).
What it does not: place experts (EPLB), or time the experts (step.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables

ROUTINGS = ("skewed", "uniform")


@dataclass(frozen=True)
class Routing:
    """How routed tokens spread over experts: `kind` skewed | uniform | measured (shares from a histogram)."""

    kind: str = "skewed"
    shares: tuple[float, ...] = ()  # measured: each expert's share of the routed tokens (sum 1)
    source: str = ""


@lru_cache(maxsize=1)
def _alphas() -> tuple[dict[str, float], dict[str, str]]:
    doc = tables.routing()
    try:
        alphas = {k: float(v) for k, v in doc["alpha"].items()}
        return alphas, {k: str(v) for k, v in doc.get("sources", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadConfig(f"specs/data/routing.toml: {e}") from None


@lru_cache(maxsize=1)
def verify_overlap() -> float:
    """ρ: the share of a verified token's routing its sequence's previous token already drew (routing.toml; read
    once: every step_parts call asks)."""
    doc = tables.routing()
    try:
        return float(doc.get("correlation", {}).get("verify_overlap", 0.0))
    except (TypeError, ValueError, AttributeError) as e:
        raise BadConfig(f"specs/data/routing.toml [correlation]: {e}") from None


def routing_draws(sequences: np.ndarray, tokens_per_seq: np.ndarray) -> np.ndarray:
    """Independent routing draws of a decode/verify step: sequences · (1 + (t − 1)·(1 − ρ)) (module docstring)."""
    t = np.asarray(tokens_per_seq, dtype=float)
    return np.asarray(sequences, dtype=float) * (1.0 + np.maximum(t - 1.0, 0.0) * (1.0 - verify_overlap()))


def alpha_for(model_type: str) -> tuple[float, str]:
    """(power-law exponent, its source) for a model family."""
    alphas, sources = _alphas()
    key = model_type if model_type in alphas else "default"
    return alphas[key], sources.get(key, "")


def _quantile_loads(n_experts: int, alpha: float, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Expected order statistics of E power-law draws on [lo, hi] (broadcast over the leading axes)."""
    u = (np.arange(n_experts) + 0.5) / n_experts
    a = 1.0 - alpha
    if abs(a) < 1e-9:
        return np.asarray(lo * (hi / lo) ** u)
    return np.asarray(((hi**a - lo**a) * u + lo**a) ** (1.0 / a))


def touched_experts(routing: Routing, model_type: str, n_experts: int, top_k: int, tokens: np.ndarray) -> np.ndarray:
    """Distinct experts one MoE layer touches over all GPUs for `tokens` routed tokens (module docstring)."""
    t_all = np.maximum(np.asarray(tokens, dtype=float), 0.0)
    uniq, inverse = np.unique(t_all, return_inverse=True)  # sweeps repeat token counts: price each once
    if routing.kind == "skewed" and uniq.size and uniq[-1] < TABLE_LIMIT and np.all(uniq == np.round(uniq)):
        table = _skewed_table(alpha_for(model_type)[0], n_experts, top_k, int(uniq[-1]) + 1)
        return np.asarray(table[uniq.astype(int)][inverse].reshape(t_all.shape))
    return _touched(routing, model_type, n_experts, top_k, uniq)[inverse].reshape(t_all.shape)


TABLE_LIMIT = 1 << 17  # integer token counts below this are priced from a growing table (the simulation's steps)
_TABLES: dict[tuple[float, int, int], np.ndarray] = {}


def _skewed_table(alpha: float, n_experts: int, top_k: int, size: int) -> np.ndarray:
    """touched(T) for T = 0, 1, … at least `size` entries, grown by doubling and cached per (α, E, k)."""
    key = (alpha, n_experts, top_k)
    table = _TABLES.get(key, np.zeros(0))
    if len(table) < size:
        n = max(size, 2 * len(table), 1024)
        new = np.arange(len(table), n, dtype=float)
        chunks = [_touched(Routing("skewed"), "", n_experts, top_k, c, alpha)  # bounded memory: 2,048 rows × E
                  for c in np.array_split(new, max(1, len(new) // 2048))]
        table = np.concatenate([table, *chunks])
        _TABLES[key] = table
    return table


def _touched(routing: Routing, model_type: str, n_experts: int, top_k: int, t: np.ndarray,
             alpha: float | None = None) -> np.ndarray:
    e, k = float(n_experts), float(top_k)
    if routing.kind == "uniform" or n_experts <= top_k:
        return np.asarray(e * (1.0 - (1.0 - k / e) ** t))
    if routing.kind == "measured":
        shares = np.asarray(routing.shares, dtype=float)
        loads = t[..., None] * k * shares
    else:
        if alpha is None:
            alpha, _ = alpha_for(model_type)
        many = (t * k > e)[..., None]
        hi = np.where(many, np.maximum(0.8 * t[..., None], 2.0), 2.0)
        x = _quantile_loads(n_experts, alpha, hi, np.where(many, 1.0, 0.01))
        loads = t[..., None] * k * x / x.sum(axis=-1, keepdims=True)
    touched = np.sum(1.0 - np.exp(-loads), axis=-1)
    return np.asarray(np.where(t > 0, np.maximum(touched, min(k, e)), 0.0))


def placement_cv(routing: Routing, model_type: str, n_experts: int, top_k: int, ep: int,
                 tokens: np.ndarray) -> np.ndarray:
    """Coefficient of variation of one expert-parallel rank's routed load from the skew alone: each rank holds
    m = E/ep experts at fixed positions (vLLM, SGLang: expert i on rank ⌊i·ep/E⌋, no EPLB by default), so its load
    is a sum of m of the step's per-expert loads drawn without replacement: Var = m·σ²·(E − m)/(E − 1), mean m·μ.
    0 for uniform routing (the per-token sampling noise is moe_imbalance's)."""
    t_all = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    if routing.kind == "uniform" or ep <= 1 or n_experts <= top_k:
        return np.zeros_like(t_all)
    t, inverse = np.unique(t_all.ravel(), return_inverse=True)
    e, k = float(n_experts), float(top_k)
    if routing.kind == "measured":
        shares = np.asarray(routing.shares, dtype=float)[None, :] + 0.0 * t[:, None]
    else:
        alpha, _ = alpha_for(model_type)
        many = (t * k > e)[:, None]
        hi = np.where(many, np.maximum(0.8 * t[:, None], 2.0), 2.0)
        x = _quantile_loads(n_experts, alpha, hi, np.where(many, 1.0, 0.01))
        shares = x / x.sum(axis=-1, keepdims=True)
    m = e / ep
    var = m * shares.var(axis=-1) * (e - m) / (e - 1.0)
    return np.asarray((np.sqrt(var) / (m * shares.mean(axis=-1)))[inverse].reshape(t_all.shape))


def describe(routing: Routing, model_type: str) -> str:
    """Provenance of the routed-expert read, in words."""
    if routing.kind == "uniform":
        return "routed experts: uniform routing (every token picks k of E at random; --routing uniform)"
    if routing.kind == "measured":
        return f"routed experts: measured expert-count histogram ({routing.source})"
    alpha, src = alpha_for(model_type)
    return f"routed experts: power-law loads, alpha {alpha:g} ({src})"
