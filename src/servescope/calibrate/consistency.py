"""Measurements that contradict each other: reported, both of them with the residual, never averaged.

Two figures contradict when they measure the same thing beyond their noise:
  the same metric at the same concurrency (and lengths)        |a − b| > n_a·a + n_b·b
  output tok/s and TPOT at the same concurrency                 the TPOT the output implies,
                                                                 (batch · OSL / output − TTFT) / (OSL − 1),
                                                                 against the TPOT figure, with the output's noise
                                                                 amplified by E2E / (E2E − TTFT)
(figures of one benchmark run are consistent by construction and are not checked against each other). A figure's
noise is the one it states (`±`, calibrate.figures), else ASSUMED_NOISE.
Does not: decide what to fit (calibrate.figure_fit raises the MeasurementError this module words).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from servescope.calibrate.figures import Figure

# Repeats of one set-up differ by 0.2 % (TPOT) / 0.4 % (TTFT) (bench/error_floor.py), but a user's figures come
# from different runs, clients and days: assumed ±5 % each unless the figure states its own (an assumption).
ASSUMED_NOISE = 0.05


@dataclass(frozen=True)
class Contradiction:
    first: Figure
    second: Figure
    residual: float  # (second − first) / first, of the compared quantity
    allowed: float  # the relative difference their noise allows
    what: str  # the quantity compared, in words

    def text(self) -> str:
        return (f"{self.first.described()} and {self.second.described()} contradict each other: {self.what} differs "
                f"by {self.residual:+.1%} (residual), beyond the ±{self.allowed:.1%} their noise allows "
                f"({_noise_words(self.first)}, {_noise_words(self.second)}); neither is used, nor an average: "
                "give the one you trust, or state a wider noise (e.g. tpot=12.1ms±10%@c1)")


def noise(f: Figure) -> float:
    """The figure's relative noise: stated, else ASSUMED_NOISE."""
    return ASSUMED_NOISE if f.noise is None else f.noise


def _noise_words(f: Figure) -> str:
    return f"±{noise(f):.1%} {'stated' if f.noise is not None else 'assumed'}"


def _same_run(a: Figure, b: Figure) -> bool:
    return bool(a.source) and a.source == b.source


def _same_load(a: Figure, b: Figure) -> bool:
    return (a.concurrency == b.concurrency and (a.isl is None or b.isl is None or a.isl == b.isl)
            and (a.osl is None or b.osl is None or a.osl == b.osl))


def contradictions(figures: Sequence[Figure],
                   implied_tpot: Callable[[Figure], tuple[float, float] | None]) -> list[Contradiction]:
    """Every pair that contradicts (module docstring). `implied_tpot(output figure)` gives (TPOT s, noise
    amplification E2E / (E2E − TTFT)) or None where it cannot be said."""
    out: list[Contradiction] = []
    for i, a in enumerate(figures):
        for b in figures[i + 1:]:
            if _same_run(a, b) or not _same_load(a, b):
                continue
            if a.metric == b.metric:
                allowed = noise(a) + noise(b) * b.value_si / a.value_si
                residual = (b.value_si - a.value_si) / a.value_si
                if abs(residual) > allowed:
                    out.append(Contradiction(a, b, residual, allowed, f"{a.metric} at c{a.concurrency}"))
            elif {a.metric, b.metric} == {"tpot", "output"}:
                tpot, output = (a, b) if a.metric == "tpot" else (b, a)
                implied = implied_tpot(output)
                if implied is None:
                    continue
                t_out, gain = implied
                allowed = noise(tpot) + noise(output) * gain
                residual = (t_out - tpot.value_si) / tpot.value_si
                if abs(residual) > allowed:
                    out.append(Contradiction(tpot, output, residual, allowed,
                                             f"the TPOT at c{tpot.concurrency} ({output.text} implies "
                                             f"{t_out * 1e3:.3g} ms)"))
    return out
