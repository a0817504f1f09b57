"""Parse what the user asks the planner for: a target, forbidden tracks, speculative-decoding inputs.

Does: turn CLI-style strings (`8ms`, `1000tok/s`, `quantization,cuda_graphs`, `0.8,0.6,0.4`) into typed values,
strictly: a wrong unit for the objective, an unknown track name or an acceptance vector that is not a
probability curve raises `PlanError` with a one-line message. The CLI stays a thin caller of these helpers.
Does not: evaluate anything (see `planner.plan`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from servescope.errors import PlanError
from servescope.units import MS_PER_S

OBJECTIVES = ("tpot", "throughput")

# Unit spelling → (objective, factor to the canonical unit: ms for TPOT, tok/s for throughput).
_TPOT_UNITS = {"ms": 1.0, "s": MS_PER_S, "us": 1e-3, "µs": 1e-3}
_RATE_UNITS = {"tok/s": 1.0, "tokens/s": 1.0, "tps": 1.0, "ktok/s": 1e3}
# A rate per user is a latency: 100 tok/s/user is a TPOT of 10 ms (objective tpot).
_PER_USER_UNITS = {"tok/s/user": 1.0, "tokens/s/user": 1.0, "tps/user": 1.0}
_TARGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-zµ/]+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    """A goal for the plan: `value` in ms (objective tpot) or output tokens/s (objective throughput). A rate
    target (`1000tok/s`) is aggregate output throughput, what benchmarks report; a rate per user
    (`100tok/s/user`) is a TPOT target (`per_user_rate` keeps the rate as typed)."""

    objective: str
    value: float
    text: str
    per_user_rate: float | None = None

    @property
    def aggregate(self) -> bool:
        """An output-throughput target of the whole instance (any concurrency), not of one user."""
        return self.objective == "throughput"

    @property
    def tpot_s(self) -> float:
        return self.value / MS_PER_S

    def met_by(self, tpot_s: float, output_tok_s: float) -> bool:
        if self.objective == "tpot":
            return tpot_s <= self.tpot_s * (1 + 1e-9)
        return output_tok_s >= self.value * (1 - 1e-9)

    def shortfall(self, tpot_s: float, output_tok_s: float) -> float:
        """Factor by which the objective still has to improve (1.0 when met)."""
        if self.objective == "tpot":
            return max(1.0, tpot_s / self.tpot_s)
        return max(1.0, self.value / output_tok_s) if output_tok_s > 0 else float("inf")


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise PlanError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    return objective


def implied_objective(target: str | None, objective: str | None) -> str:
    """The plan's objective: the one given; else the one the target's unit implies (a rate such as 1000tok/s can
    only mean throughput); else tpot. A given objective that contradicts the target still fails in parse_target."""
    if objective is not None:
        return check_objective(objective)
    match = _TARGET_RE.match(target) if target is not None else None
    return "throughput" if match and match.group(2).lower() in _RATE_UNITS else "tpot"  # tok/s/user: tpot


def parse_target(text: str, objective: str) -> Target:
    """`8ms`, `8 ms`, `0.008s`, `8000us`, `100tok/s/user` (objective tpot) or `1000tok/s`, `1.5ktok/s` (objective
    throughput: aggregate output tokens/s)."""
    check_objective(objective)
    match = _TARGET_RE.match(text)
    if not match:
        raise PlanError(f"target {text!r} is not a number with a unit (e.g. 8ms or 1000tok/s)")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not 0 < number < math.inf:  # 1e400ms reads as inf
        raise PlanError(f"target {text!r} must be a positive finite number")
    if unit in _TPOT_UNITS:
        if objective != "tpot":
            raise PlanError(f"target {text!r} is a latency but the objective is {objective}; use tok/s")
        return Target("tpot", number * _TPOT_UNITS[unit], text.strip())
    if unit in _PER_USER_UNITS:
        if objective != "tpot":
            raise PlanError(f"target {text!r} is a rate per user (a TPOT) but the objective is {objective}; "
                            "use tok/s for aggregate throughput")
        rate = number * _PER_USER_UNITS[unit]
        return Target("tpot", MS_PER_S / rate, text.strip(), per_user_rate=rate)
    if unit in _RATE_UNITS:
        if objective != "throughput":
            raise PlanError(f"target {text!r} is a rate but the objective is {objective}; use ms")
        return Target("throughput", number * _RATE_UNITS[unit], text.strip())
    valid = ", ".join([*_TPOT_UNITS, *_RATE_UNITS, *_PER_USER_UNITS])
    raise PlanError(f"target {text!r} has an unknown unit {unit!r}; valid: {valid}")


def parse_acceptance(
    positions: str | None = None, rate: float | str | None = None, k: int | None = None
) -> tuple[float, ...] | None:
    """Per-position acceptance P_1..P_k (P_i = probability that draft i is accepted, so non-increasing).

    `positions` is `P1,P2,...`; `rate` is a scalar a, expanded to P_i = a^i for i = 1..k (k required).
    Returns None when neither is given (the bundled curve is used). Both given, k disagreeing with the
    vector length, or values outside [0, 1] / increasing raise PlanError.
    """
    if positions is not None and rate is not None:
        raise PlanError("give either --acceptance P1,P2,... or --acceptance-rate A, not both")
    if positions is not None:
        if not positions.strip() or any(not v.strip() for v in positions.split(",")):
            raise PlanError(f"acceptance {positions!r} has an empty value; expected P1,P2,... e.g. 0.8,0.6,0.4")
        try:
            values = tuple(float(v) for v in positions.split(","))
        except ValueError as exc:
            raise PlanError(f"acceptance {positions!r} is not a comma-separated list of numbers") from exc
        if k is not None and k != len(values):
            raise PlanError(f"--spec-k {k} disagrees with the {len(values)} acceptance values given")
        return check_acceptance(values)
    if rate is not None:
        try:
            a = float(rate)
        except ValueError as exc:
            raise PlanError(f"acceptance rate {rate!r} is not a number") from exc
        if not 0.0 <= a <= 1.0:
            raise PlanError(f"acceptance rate {a} is outside [0, 1]")
        if k is None or k < 1:
            raise PlanError("--acceptance-rate needs --spec-k K (number of drafted tokens)")
        return tuple(a**i for i in range(1, k + 1))
    return None


def check_acceptance(values: tuple[float, ...]) -> tuple[float, ...]:
    if not values:
        raise PlanError("acceptance vector is empty")
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise PlanError(f"acceptance values {list(values)} must lie in [0, 1]")
    if any(b > a + 1e-9 for a, b in zip(values, values[1:], strict=False)):
        raise PlanError(
            f"acceptance values {list(values)} increase; P_i is the probability that draft i is accepted "
            "(all earlier drafts accepted too), so it cannot grow with i"
        )
    return values

