"""The solve behind calibrate.figure_fit: the decode levels by least squares (calibrate.levels) inside a Newton
iteration on the share knobs (logit of each share against log K, one-sided numerical derivative, damped steps),
and the knobs as efficiency changes.

Knob families: every collective call × K (collective_latency_scale × K, collective_bw_scale ÷ K: exact, the curves'
latency and bandwidth parts both scale), a class's time × K_X (its bandwidth and compute efficiencies ÷ K_X; a gemm
share turns the bundled GEMM curve off first). Communication follows the per-batch level unless a collective share
pins it. A collective share that leaves the rest of the step below its physical floor, or that no knob setting
reaches, raises MeasurementError.
Does not: sort the figures or word the result (calibrate.figure_fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servescope.analysis.vocab import COLLECTIVES
from servescope.calibrate.figures import Figure
from servescope.calibrate.levels import MIN_LEVEL, Levels, fit_levels
from servescope.errors import MeasurementError
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.perfmodel.step import TERMS, StepPrediction, decode_step

FIXED_TERMS = ("weights", "overhead")  # the batch-independent part of a decode step (calibrate.levels)
COMM = "communication"
CLASS_KNOBS = {"gemm": ("gemm_bw_eff", "compute_eff"), "moe": ("moe_bw_eff", "moe_compute_eff"),
               "attention": ("attn_bw_eff", "attn_compute_eff")}
COLLECTIVE_SHARES = (COMM, *COLLECTIVES, "gather_logits")
SHARE_TOLERANCE = 1e-6  # |logit error| at which the share solve stops
MAX_NEWTON = 30


def term_multipliers(lv: Levels) -> dict[str, float]:
    """Decode level per perfmodel term: communication 1 (its level is the collective knob), weights and overhead
    the fixed level, the rest the per-batch level."""
    return {t: 1.0 if t == COMM else lv.tpot_fixed if t in FIXED_TERMS else lv.tpot_var for t in TERMS}


def class_multipliers(lv: Levels) -> dict[str, float]:
    """Decode level per kernel class: communication 1; gemm, moe, norm and other the fixed level (at decode
    GEMMs read weights; launches and CPU are per step), attention the per-batch level."""
    a, b = lv.tpot_fixed, lv.tpot_var
    return {COMM: 1.0, "gemm": a, "moe": a, "attention": b, "norm": a, "other": a}


def knobbed(eff: Efficiency, comm_scale: float, class_scales: dict[str, float]) -> Efficiency:
    """`eff` with every collective call × comm_scale and each class's time × its scale (module docstring)."""
    knobs: dict[str, float] = {}
    if comm_scale != 1.0:
        knobs |= {"collective_latency_scale": eff.collective_latency_scale * comm_scale,
                  "collective_bw_scale": eff.collective_bw_scale / comm_scale}
    for cls, k in class_scales.items():
        if cls == "gemm":
            knobs["gemm_curve"] = 0.0
        knobs |= {name: getattr(eff, name) / k for name in CLASS_KNOBS[cls]}
    return eff.scaled(**knobs) if knobs else eff


def share_name(f: Figure) -> str:
    return f.metric.removesuffix("_share")


@dataclass
class Problem:
    """The figures sorted for the solve (calibrate.figure_fit), and the model's uncalibrated points at their
    concurrencies."""

    sc: Scenario
    at: dict[int, ServingPoint]
    tpot: list[tuple[Figure, float]]  # (figure, measured TPOT s)
    shares: list[Figure]
    notes: list[str]
    outputs: list[Figure] = field(default_factory=list)  # measured output tok/s figures, for the measured points

    @property
    def comm_pinned(self) -> bool:
        return any(share_name(f) in COLLECTIVE_SHARES for f in self.shares)




@dataclass(frozen=True)
class State:
    levels: Levels
    comm: float
    classes: dict[str, float]
    sc: Scenario  # knobbed


def _evaluate(prob: Problem, comm: float, classes: dict[str, float]) -> State:
    """Levels fitted on the scenario with these share knobs; communication follows the per-batch level unless a
    collective share pins it (a fixed point in comm: a couple of rounds)."""
    for _ in range(8):
        sc = prob.sc.with_(efficiency=knobbed(prob.sc.efficiency, comm, classes))
        levels = _levels(prob, sc, comm)
        new = comm if prob.comm_pinned or not prob.tpot else levels.tpot_var
        if abs(new / comm - 1.0) < 1e-12:
            break
        comm = new
    return State(levels, comm, classes, sc)


def _levels(prob: Problem, sc: Scenario, comm: float) -> Levels:
    if not prob.tpot:
        return Levels()
    at = {p.concurrency: p for p in predict(sc, sorted({f.concurrency for f, _ in prob.tpot}))}
    fixed, var, meas = [], [], []
    for f, t in prob.tpot:
        p = at[f.concurrency]
        fs = sum(p.terms_s[k] for k in FIXED_TERMS)
        c = p.terms_s[COMM]
        vs = p.tpot_s - fs - c
        fixed.append(fs)
        if prob.comm_pinned:
            raw = prob.at[f.concurrency]
            rest_floor = raw.floor_s - sum(x.time_s for x in raw.collectives.values())
            if t - c < rest_floor:
                raise MeasurementError(f"{', '.join(s.text for s in prob.shares)} with {f.described()}: the "
                                       f"collectives take {c * 1e3:.3g} ms of a {t * 1e3:.3g} ms TPOT, leaving "
                                       f"{(t - c) * 1e3:.3g} ms for the rest of the step, below its physical floor "
                                       f"of {rest_floor * 1e3:.3g} ms (weights and KV at the datasheet bandwidth): "
                                       "check the figures")
            var.append(vs)
            meas.append(t - c)
        else:
            var.append(vs + c / comm)
            meas.append(t)
    lv = fit_levels(fixed, var, meas, [1.0] * len(meas), [None] * len(meas))
    if min(lv.tpot_fixed, lv.tpot_var) < MIN_LEVEL:
        raise MeasurementError(f"{', '.join(s.text for s in prob.shares)}: the rest of the step would run at "
                               f"×{min(lv.tpot_fixed, lv.tpot_var):.3g} of the model, below any physics: check the "
                               "share and the TPOT")
    return lv


def decode_at(prob: Problem, st: State, c: int) -> StepPrediction:
    p = prob.at[c]
    return decode_step(st.sc, p.batch, prob.sc.isl + prob.sc.osl / 2.0)  # type: ignore[arg-type]


def _share_of(prob: Problem, st: State, f: Figure) -> tuple[float, float]:
    """(modelled time s of the share's class or collective, calibrated decode step s) at its concurrency."""
    d = decode_at(prob, st, f.concurrency)
    step = sum(term_multipliers(st.levels)[k] * v for k, v in d.terms_s.items())
    name = share_name(f)
    if name == COMM:
        return d.class_time_s.get(COMM, 0.0), step
    if name in CLASS_KNOBS:
        return d.class_time_s.get(name, 0.0) * class_multipliers(st.levels)[name], step
    coll = d.collectives.get(name)
    if coll is None or coll.time_s <= 0:
        have = ", ".join(d.collectives) or "none"
        raise MeasurementError(f"{f.text}: the model's decode step at c{f.concurrency} has no {name} "
                               f"(its collectives: {have}); check the layout (--tp/--ep/--dp)")
    return float(coll.time_s), step


def _logit_errors(prob: Problem, st: State) -> list[float]:
    out = []
    for f in prob.shares:
        x, step = _share_of(prob, st, f)
        if x <= 0 or step <= x:
            raise MeasurementError(f"{f.text}: the model has no {share_name(f)} time to scale at c{f.concurrency}")
        out.append(math.log(x / (step - x)) - math.log(f.value_si / (1.0 - f.value_si)))
    return out


def _knobs_of(prob: Problem, logk: list[float]) -> tuple[float, dict[str, float]]:
    comm, classes = 1.0, {}
    for f, lk in zip(prob.shares, logk, strict=True):
        name = share_name(f)
        if name in CLASS_KNOBS:
            classes[name] = math.exp(lk)
        else:
            comm = math.exp(lk)
    return comm, classes


def solve(prob: Problem) -> tuple[Levels, float, dict[str, float]]:
    """Newton on log K of each share (logit of the share is near-linear in it), levels fitted at every step."""
    shares = _distinct_knobs(prob)
    _check_reachable(prob)
    logk = [0.0] * len(shares)
    st = _evaluate(prob, *_knobs_of(prob, logk))
    if not shares:
        return st.levels, st.comm, st.classes
    err = _logit_errors(prob, st)
    for _ in range(MAX_NEWTON):
        if max(abs(e) for e in err) < SHARE_TOLERANCE:
            break
        jac = [_derivative(prob, logk, j, err) for j in range(len(logk))]
        step = _newton_step(jac, err)
        logk, st, err = _damped(prob, logk, step, err)
    else:
        raise MeasurementError(f"{', '.join(f.text for f in prob.shares)}: no knob setting reaches the measured "
                               "share(s) with the TPOT figures; check them")
    return st.levels, st.comm, st.classes


def _derivative(prob: Problem, logk: list[float], j: int, err: list[float]) -> list[float]:
    """d(logit errors)/d(log K_j), one-sided: forward, or backward where a step forward leaves the physics."""
    for h in (1e-4, -1e-4):
        moved = [x + (h if i == j else 0.0) for i, x in enumerate(logk)]
        try:
            e2 = _logit_errors(prob, _evaluate(prob, *_knobs_of(prob, moved)))
        except MeasurementError:
            continue
        return [(a - b) / h for a, b in zip(e2, err, strict=True)]
    raise MeasurementError(f"{', '.join(f.text for f in prob.shares)}: at the edge of what the physics allows "
                           "with the TPOT figures; check them")


def _check_reachable(prob: Problem) -> None:
    """A collective share with a TPOT at its concurrency leaves the rest of the step (1 − share) · TPOT: below the
    rest's physical floor it is refused with the floor before any solve."""
    for f in prob.shares:
        if share_name(f) not in COLLECTIVE_SHARES:
            continue
        for t_fig, t in prob.tpot:
            if t_fig.concurrency != f.concurrency:
                continue
            raw = prob.at[f.concurrency]
            rest_floor = raw.floor_s - sum(x.time_s for x in raw.collectives.values())
            if (1.0 - f.value_si) * t < rest_floor:
                raise MeasurementError(f"{f.text} with {t_fig.described()}: leaves {(1 - f.value_si) * t * 1e3:.3g} "
                                       f"ms for the rest of the step, below its physical floor of "
                                       f"{rest_floor * 1e3:.3g} ms (weights and KV at the datasheet bandwidth, no "
                                       "overhead): check the figures")


def _distinct_knobs(prob: Problem) -> list[Figure]:
    """One share per knob: two collective shares would set the one collective knob twice."""
    seen: dict[str, Figure] = {}
    for f in prob.shares:
        knob = share_name(f) if share_name(f) in CLASS_KNOBS else COMM
        if knob in seen:
            raise MeasurementError(f"{seen[knob].text} and {f.text} both set the {knob} knob: give one of them")
        seen[knob] = f
    prob.shares = list(seen.values())
    return prob.shares


def _newton_step(jac_cols: list[list[float]], err: list[float]) -> list[float]:
    """Solve J · step = −err (J given by columns), bounded to ±2 in log K."""
    import numpy as np

    jac = np.asarray(jac_cols, dtype=float).T
    try:
        step = np.linalg.solve(jac, -np.asarray(err))
    except np.linalg.LinAlgError:
        step = -np.asarray(err)
    return [float(max(-2.0, min(2.0, s))) for s in step]


def _damped(prob: Problem, logk: list[float], step: list[float],
            err: list[float]) -> tuple[list[float], State, list[float]]:
    """The Newton step, halved until the scenario is valid and the error shrinks (at most 8 halvings)."""
    size = 1.0
    for _ in range(8):
        trial = [x + size * s for x, s in zip(logk, step, strict=True)]
        try:
            st = _evaluate(prob, *_knobs_of(prob, trial))
            new = _logit_errors(prob, st)
        except MeasurementError:
            size /= 2
            continue
        if max(abs(e) for e in new) < max(abs(e) for e in err) or size < 1e-2:
            return trial, st, new
        size /= 2
    raise MeasurementError(f"{', '.join(f.text for f in prob.shares)}: no knob setting reaches the measured "
                           "share(s) with the TPOT figures; check them")
