"""Speculative decoding math: acceptance curves, accepted length, gain, and where speculation stops paying.

Does: load the bundled measured acceptance curves (planner/data/acceptance.toml, each with its source), turn
acceptance inputs into per-position vectors, and compute

    accepted length   AL = 1 + Σ_{i=1..k} P_i         (scalar a: P_i = a^i, so AL = (1 − a^(k+1)) / (1 − a))
    speculative TPOT  = iteration(B, k) / AL      (iteration: perfmodel.speculative — verify + draft loop + fixed)
    gain              = t_decode(B) / speculative TPOT

where P_i is the probability that draft i is accepted (every earlier draft accepted too). The gain falls with
concurrency because verification turns compute-bound (B·(k+1) GEMM rows), touches more experts (MoE) and the
host costs grow with the batch, while AL stays fixed.
Does not: price the steps or the iteration (perfmodel.speculative does, through the planner's evaluator: the
one formula of the gain, the same the published-pairs check in docs/plan.md scores).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from servescope.errors import PlanError
from servescope.planner.target import check_acceptance, parse_acceptance

METHODS = ("eagle", "eagle3", "mtp", "draft", "ngram")
DEFAULT_MAX_K = 8


@dataclass(frozen=True)
class SpecConfig:
    """What the user asks for. `acceptance` (P_1..P_k) overrides the bundled curve; k None = best k."""

    method: str = "eagle3"
    k: int | None = None
    acceptance: tuple[float, ...] | None = None
    draft_model: str | None = None
    acceptance_source: str | None = None  # where `acceptance` came from when not typed (planner.spec_calibrate)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise PlanError(f"unknown speculative method {self.method!r}; valid: eagle3, eagle, mtp, ngram, draft:MODEL")
        if self.method == "draft" and not self.draft_model:
            raise PlanError("speculative method 'draft' needs a draft model (draft:MODEL)")
        if self.method not in ("draft", "eagle", "eagle3") and self.draft_model:
            raise PlanError(f"a draft model or head config is only used with draft, eagle or eagle3, not "
                            f"{self.method!r}")
        if self.k is not None and not 1 <= self.k <= 16:
            raise PlanError(f"--spec-k {self.k} is outside 1..16")
        if self.acceptance is not None:
            check_acceptance(self.acceptance)
            if self.k is not None and self.k != len(self.acceptance):
                raise PlanError(f"--spec-k {self.k} disagrees with the {len(self.acceptance)} acceptance values")


def parse_spec_method(text: str) -> tuple[str, str | None]:
    """`eagle3`, `eagle`, `mtp`, `ngram`, `draft:MODEL` or `eagle3:HEAD_CONFIG` (the head's own config.json or
    HF id) → (method, draft model / head config or None)."""
    method, _, model = text.strip().partition(":")
    method = method.lower().replace("-", "")
    if method not in METHODS:
        raise PlanError(f"unknown speculative method {text!r}; valid: eagle3, eagle, mtp, ngram, draft:MODEL")
    return method, (model.strip() or None)


def spec_from_options(
    method: str | None = None,
    k: int | None = None,
    acceptance: str | None = None,
    acceptance_rate: float | str | None = None,
) -> SpecConfig | None:
    """CLI options (--spec-method, --spec-k, --acceptance, --acceptance-rate) → SpecConfig, or None when none
    is given (the planner then picks MTP or EAGLE-3 and the bundled curve). Bad combinations raise PlanError."""
    if method is None and k is None and acceptance is None and acceptance_rate is None:
        return None
    name, draft = parse_spec_method(method or "eagle3")
    if draft is not None:
        from servescope.specs.models import load_model

        load_model(draft)  # an unknown draft model fails here (UnknownName, with close matches), not as a silent n/a
    positions = parse_acceptance(acceptance, acceptance_rate, k)
    return SpecConfig(name, k if k is not None else (len(positions) if positions else None), positions, draft)


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance with a low and high bound, and where it comes from."""

    positions: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    source: str
    name: str

    def al(self, k: int, which: str = "nominal") -> float:
        vec = {"nominal": self.positions, "low": self.low, "high": self.high}[which]
        return accepted_length(vec[:k])

    @property
    def max_k(self) -> int:
        return len(self.positions)


def accepted_length(positions: tuple[float, ...] | list[float]) -> float:
    """AL = 1 + Σ P_i (bonus token included)."""
    return 1.0 + float(sum(positions))


def accepted_length_scalar(rate: float, k: int) -> float:
    """AL for i.i.d. acceptance a and k drafts: 1 + Σ_{i=1..k} a^i (Leviathan et al. 2023, Eq. 1)."""
    return 1.0 + sum(rate**i for i in range(1, k + 1))


def positions_from_al(al_curve: list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """P_i = AL(i) − AL(i−1), AL(0) = 1. Clipped at 0: measured curves are not always monotone."""
    prev, out = 1.0, []
    for value in al_curve:
        out.append(max(0.0, value - prev))
        prev = max(prev, value)
    return tuple(out)


@lru_cache(maxsize=1)
def _curves() -> tuple[dict[str, object], ...]:
    text = resources.files("servescope.planner").joinpath("data", "acceptance.toml").read_text(encoding="utf-8")
    return tuple(tomllib.loads(text)["curve"])


def _vector(entry: dict[str, object], suffix: str) -> tuple[float, ...] | None:
    if f"positions{suffix}" in entry:
        return tuple(float(x) for x in entry[f"positions{suffix}"])  # type: ignore[attr-defined]
    if f"al{suffix}" in entry:
        return positions_from_al([float(x) for x in entry[f"al{suffix}"]])  # type: ignore[attr-defined]
    return None


def bundled_acceptance(model_name: str, method: str) -> Acceptance | None:
    """The first bundled curve whose method matches and whose model keys occur in `model_name`."""
    name = model_name.lower()
    wanted = "eagle3" if method == "eagle" else method
    for entry in _curves():
        if entry["method"] != wanted or not any(m in name for m in entry["models"]):  # type: ignore[attr-defined]
            continue
        nominal = _vector(entry, "")
        assert nominal is not None
        low = _vector(entry, "_low") or nominal
        high = _vector(entry, "_high") or nominal
        return Acceptance(nominal, _pad(low, len(nominal)), _pad(high, len(nominal)), str(entry["source"]),
                          str(entry["name"]))
    return None


def _pad(vec: tuple[float, ...], n: int) -> tuple[float, ...]:
    return (vec + (0.0,) * n)[:n] if len(vec) < n else vec


def user_acceptance(positions: tuple[float, ...], source: str | None = None) -> Acceptance:
    """A user-given vector (or one calibrated on the user's figures: `source` says so): the bounds equal the value
    (its uncertainty is the user's)."""
    vec = check_acceptance(positions)
    if source is not None:
        return Acceptance(vec, vec, vec, source, "calibrated")
    return Acceptance(vec, vec, vec, "user input (--acceptance / --acceptance-rate)", "user")


def concurrency_grid(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... up to max_concurrency (included)."""
    grid, c = [], 1
    while c < max_concurrency:
        grid.append(c)
        c *= 2
    grid.append(max(1, max_concurrency))
    return sorted(set(grid))


def breakeven_concurrency(gain_at: Callable[[int], float], max_concurrency: int) -> float | None:
    """Concurrency where the gain crosses 1.0 (log-linear interpolation between grid points).

    None when speculation still pays at `max_concurrency`; 1.0 when it does not pay even at batch 1.
    """
    prev_c, prev_g = None, None
    for c in concurrency_grid(max_concurrency):
        g = gain_at(c)
        if g < 1.0:
            if prev_c is None or prev_g is None:
                return 1.0
            # interpolate in log c: the gain falls roughly linearly in log c between grid points
            t = (prev_g - 1.0) / (prev_g - g)
            return math.exp(math.log(prev_c) + t * (math.log(c) - math.log(prev_c)))
        prev_c, prev_g = c, g
    return None
