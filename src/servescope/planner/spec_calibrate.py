"""The speculative track calibrated on what the user measured with speculation on (issue 26 item 3).

Does: turn `spec_gain=G@cN` (TPOT without / with speculation) or `spec_tpot=T@cN` (TPOT with it on; G = the
deployment's TPOT at cN — a measured `tpot` figure there, else the calibrated model's — over T) into the acceptance
the track then prices with: the acceptance curve the track would use (the user's, else the bundled measured one)
with every position scaled by one factor m (P_i · m, capped at P_MAX), m set by bisection so that the best k's
decode-step gain at cN — perfmodel.speculative.spec_gain on the calibrated scenario: verify, draft and fixed costs
as the engine runs them — equals G. The gain at every other concurrency then follows the verify-step physics (the
experts B·(k+1) tokens touch, the verify path, padding), not the measured number.
When the user gave the acceptance too (`--acceptance` or an engine log), the acceptance is theirs: the figure is
checked against the model, and the residual is said, not fitted.
A gain above what the drafter can give (every drafted token accepted) is refused, naming the figure and the bound.
Does not: price the track (planner.tracks_spec) or parse figures (calibrate.figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from servescope.calibrate.figures import Figure
from servescope.errors import MeasurementError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import predict
from servescope.perfmodel.speculative import SpecShape, spec_gain
from servescope.planner.speculative import (
    Acceptance,
    SpecConfig,
    bundled_acceptance,
    user_acceptance,
)

P_MAX = 0.99  # a position's acceptance never reaches 1 (sampling at temperature > 0 rejects some drafts)
_BISECT = 40


Costs = dict[int, tuple[float, float]]  # k -> (plain decode step s, one speculative iteration s) at the figure's batch


def _costs(sc: Scenario, cfg: SpecConfig, n_positions: int, batch: int) -> Costs:
    """Each candidate k's plain step and iteration, priced once: neither depends on the acceptance (an iteration
    verifies k+1 tokens whatever is accepted), so the gain at any acceptance is arithmetic on these."""
    ks = [cfg.k] if cfg.k is not None else list(range(1, n_positions + 1))
    out: Costs = {}
    for k in ks:
        g = spec_gain(sc, SpecShape(cfg.method, k), 1.0, batch, sc.decode_context, cfg.draft_model)
        out[k] = (g.base_step_s, g.iteration.total_s)
    return out


def _gain(costs: Costs, positions: tuple[float, ...]) -> tuple[float, int]:
    """The best k's decode-step gain with these acceptance positions, and that k (SpecGain.gain: t_base · AL /
    iteration)."""
    best = (0.0, min(costs))
    for k, (base_s, iteration_s) in costs.items():
        best = max(best, (base_s / (iteration_s / (1.0 + sum(positions[:k]))), k))
    return best


def _scaled(acc: Acceptance, m: float, k: int | None = None) -> tuple[float, ...]:
    """Every position × m, capped at P_MAX, non-increasing (a measured curve's tail can tick up by noise; P_i counts
    drafts accepted with all earlier ones, so it cannot grow)."""
    out: list[float] = []
    for p in acc.positions[:k]:
        out.append(min(p * m, P_MAX, out[-1] if out else P_MAX))
    return tuple(out)


def measured_gain(sc: Scenario, figure: Figure, measured_tpot_s: dict[int, float]) -> float:
    """G of a spec figure: spec_gain as given; spec_tpot against the TPOT measured at its concurrency (else the
    calibrated model's)."""
    if figure.metric == "spec_gain":
        return figure.value_si
    base = measured_tpot_s.get(figure.concurrency)
    if base is None:
        base = predict(sc, [figure.concurrency])[0].tpot_s
    return base / figure.value_si


def calibrated_spec(sc: Scenario, spec: SpecConfig | None, figures: Sequence[Figure],
                    measured_tpot_s: dict[int, float] | None = None) -> tuple[SpecConfig | None, str]:
    """The SpecConfig the track prices with after the figures (module docstring), and one line saying what was
    done; (spec, "") when there is no figure or no curve to scale."""
    if not figures:
        return spec, ""
    f = figures[0]
    cfg = spec or SpecConfig(method="mtp" if sc.model.n_mtp_layers > 0 else "eagle3")
    target = measured_gain(sc, f, measured_tpot_s or {})
    batch = max(1, min(f.concurrency, predict(sc, [f.concurrency])[0].batch))
    if cfg.acceptance is not None:
        positions = user_acceptance(cfg.acceptance).positions
        got, k = _gain(_costs(sc, cfg, len(positions), batch), positions)
        return cfg, (f"{f.described()}: the acceptance is yours, so the figure checks the model: k={k} priced "
                     f"{got:.2f}× against {target:.2f}× measured ({got / target - 1:+.1%})")
    acc = bundled_acceptance(sc.model.name, cfg.method)
    if acc is None:
        return cfg, f"{f.described()}: no acceptance curve to scale for {cfg.method}; pass --acceptance"
    top = max(P_MAX / max(max(acc.positions), 1e-9), 1.0)
    costs = _costs(sc, cfg, len(acc.positions), batch)
    g_max, k_max = _gain(costs, _scaled(acc, top))
    if target > g_max:
        raise MeasurementError(f"{f.described()}: a gain of {target:.3g}× is above what {cfg.method} can give here "
                               f"({g_max:.3g}× at k={k_max} with every drafted token accepted at {P_MAX}): check the "
                               "figure or the scenario")
    lo, hi = 0.0, top
    for _ in range(_BISECT):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gain(costs, _scaled(acc, mid))[0] < target else (lo, mid)
    m = (lo + hi) / 2
    positions = _scaled(acc, m, cfg.k)
    _, k = _gain(costs, positions)
    source = (f"{acc.name} × {m:.3f} per position, calibrated on {f.text} (best k={k}: AL "
              f"{1 + sum(positions[:k]):.2f}); bounds = the scaled value")
    out = replace(cfg, acceptance=positions, acceptance_source=source)
    return out, f"speculative track calibrated on {f.described()}: acceptance {source}"
