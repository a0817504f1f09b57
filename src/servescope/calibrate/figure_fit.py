"""A deployment calibrated on the figures its owner measured: a few physical knobs and the decode levels, each said
with the inputs that identified it.

Knobs, and what identifies each:
  decode level(s)     TPOT figures (or output tok/s, read as TPOT): one concurrency sets one level s on the decode
                      step's terms (TPOT' = s · TPOT); two or more separate the fixed per-step part (weights +
                      overhead, level a) from the per-batch part (KV, compute, ...: level b) — calibrate.levels
  collective time K   a share of a collective (`allreduce_share`) or of the communication class at concurrency c:
                      every collective call costs K × its measured isolated curve (collective_latency_scale × K,
                      collective_bw_scale ÷ K: in-situ rank skew and synchronisation), K set so that the collective's
                      share of the calibrated decode step at c is the measured one; the decode levels then cover the
                      other terms only. Without a collective share, communication follows the per-batch level b.
  class time K_X      a share of gemm, moe or attention: that class's efficiencies ÷ K_X (a gemm share prices GEMMs
                      by the roofline × efficiency, not the bundled measured GEMM curve), so its share of the
                      calibrated step is the measured one.
A share and a TPOT at the same concurrency fix the level and the split; k knobs from k numbers reproduce them by
construction ("fitted, not validated"); more numbers than knobs leave residuals, listed. The solve: the levels by
least squares (calibrate.levels) inside a Newton iteration on the share knobs (logit of each share against log K,
numerical derivative). Figures that contradict each other are refused with both and the residual
(calibrate.consistency); a TPOT faster than the decode step's physical floor, a share below its collective's latency
floor or needing an efficiency above the datasheet peak are refused with the floor. TTFT, ITL, E2E and request-rate
figures are set aside with the reason (a TTFT level measured at other concurrencies raised held-out TTFT error,
calibrate.held_out).
Does not: read files (calibrate.inputs), restate points (calibrate.measured) or plan (planner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from servescope.analysis.classify import COLLECTIVES
from servescope.calibrate.consistency import contradictions
from servescope.calibrate.figures import Figure
from servescope.calibrate.levels import MIN_LEVEL, Levels, fit_levels
from servescope.errors import MeasurementError
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.perfmodel.step import TERMS, StepPrediction, decode_step

FIXED_TERMS = ("weights", "overhead")  # the batch-independent part of a decode step (calibrate.levels)
COMM = "communication"
LENGTH_TOLERANCE = 0.05  # a figure's isl/osl may differ from the scenario's by this share (a result file's means)
CLASS_KNOBS = {"gemm": ("gemm_bw_eff", "compute_eff"), "moe": ("moe_bw_eff", "moe_compute_eff"),
               "attention": ("attn_bw_eff", "attn_compute_eff")}
CLASS_LEVEL = {"gemm": "fixed", "moe": "fixed", "attention": "per_batch"}  # at decode: weights read, KV read
COLLECTIVE_SHARES = (COMM, *COLLECTIVES, "gather_logits")
SHARE_TOLERANCE = 1e-6  # |logit error| at which the share solve stops
MAX_NEWTON = 30


@dataclass(frozen=True)
class Knob:
    """One fitted knob: its name, value, the efficiency fields it sets, and the figures that identified it."""

    name: str
    value: float
    sets: str
    inputs: tuple[str, ...]

    def text(self) -> str:
        return f"{self.name} ×{self.value:.3g} ({self.sets}) from {', '.join(self.inputs)}"


@dataclass(frozen=True)
class MeasuredPoint:
    """A measured point of the TPOT curve: TPOT (s), output tok/s of the instance when measured (else None), and
    the figures it came from."""

    concurrency: int
    tpot_s: float
    output_tok_s: float | None
    figures: tuple[str, ...]


@dataclass(frozen=True)
class FigureFit:
    """The calibration of a deployment on figures (module docstring). `apply` sets the knobs on a scenario;
    `multipliers` are the decode levels per perfmodel term (communication 1: its level is the knob K)."""

    levels: Levels = field(default_factory=Levels)
    comm_scale: float = 1.0
    class_scales: tuple[tuple[str, float], ...] = ()
    knobs: tuple[Knob, ...] = ()
    used: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    numbers: int = 0
    points: tuple[MeasuredPoint, ...] = ()
    residuals: tuple[tuple[str, float], ...] = ()  # (figure, calibrated/measured − 1) of every TPOT figure used
    shares: tuple[tuple[str, int, float], ...] = ()  # (share name, concurrency, measured share) fitted

    @property
    def calibrated(self) -> bool:
        return bool(self.knobs)

    @property
    def validated(self) -> bool:
        """More numbers than knobs: the residuals say something; k knobs from k numbers do not."""
        return self.numbers > len(self.knobs)

    @property
    def case(self) -> str:
        """The held-out range case (specs/data/calibrated_ranges.json) of this many TPOT levels."""
        if self.levels.tpot_points == 0:
            return "uncalibrated"
        return "calibrated_2pt" if self.levels.tpot_fixed != self.levels.tpot_var else "calibrated_1pt"

    def status(self) -> str:
        """"fitted, not validated (k knobs from k numbers)" or what the extra numbers say."""
        k, n = len(self.knobs), self.numbers
        if not self.validated:
            return f"fitted, not validated ({k} knob{'s' * (k != 1)} from {n} number{'s' * (n != 1)})"
        worst = max((abs(r) for _, r in self.residuals), default=0.0)
        return f"{k} knob{'s' * (k != 1)} from {n} numbers: largest TPOT residual {worst:.1%}"

    def apply(self, sc: Scenario) -> Scenario:
        """The scenario with the fitted knobs set on its efficiency."""
        if self.comm_scale == 1.0 and not self.class_scales:
            return sc
        return sc.with_(efficiency=knobbed(sc.efficiency, self.comm_scale, dict(self.class_scales)))

    def multipliers(self) -> dict[str, float]:
        """Decode level per perfmodel term of the knobbed scenario's prediction."""
        lv = self.levels
        return {t: 1.0 if t == COMM else lv.tpot_fixed if t in FIXED_TERMS else lv.tpot_var for t in TERMS}

    def class_multipliers(self) -> dict[str, float]:
        """Decode level per kernel class (StepPrediction.class_time_s): communication 1; gemm and moe the fixed
        level (at decode they read weights), attention the per-batch level, norm and other (launches, CPU) the
        fixed level. Exact with one level; with two an approximation for a class that is compute-bound."""
        a, b = self.levels.tpot_fixed, self.levels.tpot_var
        return {COMM: 1.0, "gemm": a, "moe": a, "attention": b, "norm": a, "other": a}

    def measured_at(self, concurrency: int) -> MeasuredPoint | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)


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


def _length_problem(sc: Scenario, f: Figure) -> str | None:
    def off(given: int | None, have: int) -> bool:
        return given is not None and abs(given - have) > LENGTH_TOLERANCE * have

    if off(f.isl, sc.isl) or off(f.osl, sc.osl):
        given = ", ".join(f"{k.upper()} {v}" for k, v in (("isl", f.isl), ("osl", f.osl)) if v is not None)
        fix = " ".join(f"--{k} {v}" for k, v in (("isl", f.isl), ("osl", f.osl)) if v is not None)
        return (f"{f.described()}: measured at {given}, the scenario has ISL {sc.isl} / OSL {sc.osl}; pass "
                f"{fix} to match")
    return None


def _share_name(f: Figure) -> str:
    return f.metric.removesuffix("_share")


def _why_not(f: Figure) -> str:
    if f.metric == "ttft":
        return "TTFT is kept as modelled: a TTFT level measured at other concurrencies raised held-out TTFT error"
    if f.metric == "output":
        return "a TPOT figure at the same concurrency is used instead"
    return f"{f.metric} does not set a knob"


@dataclass
class _Problem:
    """The figures sorted for the solve, and the model's uncalibrated points at their concurrencies."""

    sc: Scenario
    at: dict[int, ServingPoint]
    tpot: list[tuple[Figure, float]]  # (figure, measured TPOT s)
    shares: list[Figure]
    notes: list[str]
    outputs: list[Figure] = field(default_factory=list)  # measured output tok/s figures, for the measured points

    @property
    def comm_pinned(self) -> bool:
        return any(_share_name(f) in COLLECTIVE_SHARES for f in self.shares)


def fit_figures(sc: Scenario, figures: Sequence[Figure]) -> FigureFit:
    """Fit the knobs the figures identify (module docstring); MeasurementError (one line) for figures that
    contradict each other, cannot be reached by the physics, or were measured at other lengths."""
    if not figures:
        return FigureFit()
    for f in figures:
        if (bad := _length_problem(sc, f)) is not None:
            raise MeasurementError(bad)
    prob = _sort(sc, figures)
    if not prob.tpot and not prob.shares:
        return FigureFit(notes=tuple(prob.notes))
    levels, comm, classes = _solve(prob)
    return _result(prob, levels, comm, classes)


def _sort(sc: Scenario, figures: Sequence[Figure]) -> _Problem:
    at = {p.concurrency: p for p in predict(sc, sorted({f.concurrency for f in figures}))}

    def implied(f: Figure) -> tuple[float, float] | None:
        p, osl = at[f.concurrency], f.osl or sc.osl
        ttft = next((g.value_si for g in figures if g.metric == "ttft" and g.concurrency == f.concurrency), p.ttft_s)
        e2e = p.batch * osl / f.value_si
        if osl <= 1 or e2e <= ttft:
            return None
        return (e2e - ttft) / (osl - 1), e2e / (e2e - ttft)

    bad = contradictions(figures, implied)
    if bad:
        raise MeasurementError("; ".join(c.text() for c in bad))
    direct = {f.concurrency for f in figures if f.metric == "tpot"}
    tpot: list[tuple[Figure, float]] = []
    shares: list[Figure] = []
    notes: list[str] = []
    for f in figures:
        value = f.value_si if f.metric == "tpot" else None
        if f.metric == "output" and f.concurrency not in direct and (got := implied(f)) is not None:
            value = got[0]
        if value is not None:
            _check_floor(f, value, at[f.concurrency])
            tpot.append((f, value))
        elif f.is_share and not any(g.metric == f.metric and g.concurrency == f.concurrency for g in shares):
            _check_share(f)
            shares.append(f)
        elif f.is_share:
            notes.append(f"{f.described()}: agrees with the first {f.metric} at c{f.concurrency} within the noise; "
                         "the first is used")
        else:
            notes.append(f"{f.described()}: not used to calibrate ({_why_not(f)})")
    outputs = [f for f in figures if f.metric == "output"]
    return _Problem(sc, at, tpot, shares, notes, outputs)


def _check_floor(f: Figure, tpot_s: float, p: ServingPoint) -> None:
    if tpot_s < p.floor_s:
        raise MeasurementError(f"{f.described()}: a TPOT of {tpot_s * 1e3:.3g} ms is faster than the physical floor "
                               f"of this decode step ({p.floor_s * 1e3:.3g} ms at batch {p.batch}): check the scenario "
                               "(model, GPU, layout, quantization) or the figure")


def _check_share(f: Figure) -> None:
    name = _share_name(f)
    if name not in COLLECTIVE_SHARES and name not in CLASS_KNOBS:
        known = ", ".join(f"{n}_share" for n in (COMM, *CLASS_KNOBS, *COLLECTIVES))
        raise MeasurementError(f"{f.text}: the model prices no kernel time of class {name} (it counts such kernels' "
                               f"launches as overhead); shares that calibrate: {known}")
    if not 0.0 < f.value_si < 1.0:
        raise MeasurementError(f"{f.text}: a share of {f.value_si:g} leaves nothing to split; give one strictly "
                               "between 0 and 1")


# --- the solve -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _State:
    levels: Levels
    comm: float
    classes: dict[str, float]
    sc: Scenario  # knobbed


def _evaluate(prob: _Problem, comm: float, classes: dict[str, float]) -> _State:
    """Levels fitted on the scenario with these share knobs; communication follows the per-batch level unless a
    collective share pins it (a fixed point in comm: a couple of rounds)."""
    for _ in range(8):
        sc = prob.sc.with_(efficiency=knobbed(prob.sc.efficiency, comm, classes))
        levels = _levels(prob, sc, comm)
        new = comm if prob.comm_pinned or not prob.tpot else levels.tpot_var
        if abs(new / comm - 1.0) < 1e-12:
            break
        comm = new
    return _State(levels, comm, classes, sc)


def _levels(prob: _Problem, sc: Scenario, comm: float) -> Levels:
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


def _step(prob: _Problem, st: _State, c: int) -> StepPrediction:
    p = prob.at[c]
    return decode_step(st.sc, p.batch, prob.sc.isl + prob.sc.osl / 2.0)  # type: ignore[arg-type]


def _share_of(prob: _Problem, st: _State, f: Figure) -> tuple[float, float]:
    """(modelled time s of the share's class or collective, calibrated decode step s) at its concurrency."""
    d = _step(prob, st, f.concurrency)
    fit = FigureFit(levels=st.levels)
    step = sum(fit.multipliers()[k] * v for k, v in d.terms_s.items())
    name = _share_name(f)
    if name == COMM:
        return d.class_time_s.get(COMM, 0.0), step
    if name in CLASS_KNOBS:
        return d.class_time_s.get(name, 0.0) * fit.class_multipliers()[name], step
    coll = d.collectives.get(name)
    if coll is None or coll.time_s <= 0:
        have = ", ".join(d.collectives) or "none"
        raise MeasurementError(f"{f.text}: the model's decode step at c{f.concurrency} has no {name} "
                               f"(its collectives: {have}); check the layout (--tp/--ep/--dp)")
    return float(coll.time_s), step


def _logit_errors(prob: _Problem, st: _State) -> list[float]:
    out = []
    for f in prob.shares:
        x, step = _share_of(prob, st, f)
        if x <= 0 or step <= x:
            raise MeasurementError(f"{f.text}: the model has no {_share_name(f)} time to scale at c{f.concurrency}")
        out.append(math.log(x / (step - x)) - math.log(f.value_si / (1.0 - f.value_si)))
    return out


def _knobs_of(prob: _Problem, logk: list[float]) -> tuple[float, dict[str, float]]:
    comm, classes = 1.0, {}
    for f, lk in zip(prob.shares, logk, strict=True):
        name = _share_name(f)
        if name in CLASS_KNOBS:
            classes[name] = math.exp(lk)
        else:
            comm = math.exp(lk)
    return comm, classes


def _solve(prob: _Problem) -> tuple[Levels, float, dict[str, float]]:
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


def _derivative(prob: _Problem, logk: list[float], j: int, err: list[float]) -> list[float]:
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


def _check_reachable(prob: _Problem) -> None:
    """A collective share with a TPOT at its concurrency leaves the rest of the step (1 − share) · TPOT: below the
    rest's physical floor it is refused with the floor before any solve."""
    for f in prob.shares:
        if _share_name(f) not in COLLECTIVE_SHARES:
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


def _distinct_knobs(prob: _Problem) -> list[Figure]:
    """One share per knob: two collective shares would set the one collective knob twice."""
    seen: dict[str, Figure] = {}
    for f in prob.shares:
        knob = _share_name(f) if _share_name(f) in CLASS_KNOBS else COMM
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


def _damped(prob: _Problem, logk: list[float], step: list[float],
            err: list[float]) -> tuple[list[float], _State, list[float]]:
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


# --- the result ----------------------------------------------------------------------------------------------


def _result(prob: _Problem, levels: Levels, comm: float, classes: dict[str, float]) -> FigureFit:
    fit = FigureFit(levels=levels, comm_scale=comm, class_scales=tuple(sorted(classes.items())))
    sc = fit.apply(prob.sc)
    _check_share_floors(prob, fit, sc)
    knobs = _knob_list(prob, levels, comm, classes)
    at = {p.concurrency: p for p in predict(sc, sorted({f.concurrency for f, _ in prob.tpot}))} if prob.tpot else {}
    mult = fit.multipliers()
    residuals = []
    for f, t in prob.tpot:
        cal = sum(mult[k] * v for k, v in at[f.concurrency].terms_s.items())
        residuals.append((f.text, cal / t - 1.0))
    used = tuple(f.text for f, _ in prob.tpot) + tuple(f.text for f in prob.shares)
    return FigureFit(levels, comm, fit.class_scales, tuple(knobs), used, tuple(prob.notes), len(used),
                     _points(prob), tuple(residuals), tuple((_share_name(f), f.concurrency, f.value_si)
                                                            for f in prob.shares))


def _check_share_floors(prob: _Problem, fit: FigureFit, sc: Scenario) -> None:
    """A collective share below the collective's latency floor, or a class share that needs an efficiency above
    the datasheet peak, is refused with the floor."""
    eff = sc.efficiency
    for f in prob.shares:
        name = _share_name(f)
        if name in CLASS_KNOBS:
            over = [k for k in CLASS_KNOBS[name] if getattr(eff, k) > 1.0]
            if over:
                raise MeasurementError(f"{f.text}: {name} would have to run above the datasheet peak "
                                       f"({', '.join(f'{k} = {getattr(eff, k):.2f}' for k in over)} > 1): the share "
                                       "is below the physical floor of that class")
            continue
        p = prob.at[f.concurrency]
        lat_only = prob.sc.with_(efficiency=prob.sc.efficiency.scaled(collective_bw_scale=1e12))
        d = decode_step(lat_only, p.batch, prob.sc.isl + prob.sc.osl / 2.0)  # type: ignore[arg-type]
        floor = d.class_time_s.get(COMM, 0.0) if name == COMM else float(
            d.collectives[name].time_s if name in d.collectives else 0.0)
        now = _step(prob, _State(fit.levels, fit.comm_scale, dict(fit.class_scales), sc), f.concurrency)
        have = now.class_time_s.get(COMM, 0.0) if name == COMM else float(now.collectives[name].time_s)
        if have < floor * (1 - 1e-9):
            raise MeasurementError(f"{f.text}: puts {name} at {have * 1e3:.3g} ms per decode step, below its "
                                   f"physical floor of {floor * 1e3:.3g} ms (its calls at the measured isolated "
                                   "latency): check the share or the TPOT")


def _knob_list(prob: _Problem, levels: Levels, comm: float, classes: dict[str, float]) -> list[Knob]:
    tpots = tuple(f.text for f, _ in prob.tpot)
    out: list[Knob] = []
    for f in prob.shares:
        name = _share_name(f)
        same_c = tuple(t.text for t, _ in prob.tpot if t.concurrency == f.concurrency)
        if name in CLASS_KNOBS:
            out.append(Knob(f"{name} time", classes[name], f"{' and '.join(CLASS_KNOBS[name])} ÷{classes[name]:.3g}",
                            (f.text, *same_c)))
        else:
            out.append(Knob("collective time", comm, f"collective_latency_scale ×{comm:.3g}, collective_bw_scale "
                            f"÷{comm:.3g}: each collective call {comm:.3g}× its measured isolated curve",
                            (f.text, *same_c)))
    rest = "the other terms" if prob.comm_pinned else "every term (communication through the collective scales)"
    if levels.tpot_points and levels.tpot_fixed == levels.tpot_var:
        out.append(Knob("decode level", levels.tpot_fixed, f"{rest} of the decode step", tpots))
    elif levels.tpot_points:
        out.append(Knob("fixed decode level", levels.tpot_fixed, "weights + overhead terms", tpots))
        out.append(Knob("per-batch decode level", levels.tpot_var,
                        "KV, compute and the other per-batch terms" + ("" if prob.comm_pinned else
                                                                        ", communication through the collective "
                                                                        "scales"), tpots))
    return out


def _points(prob: _Problem) -> tuple[MeasuredPoint, ...]:
    """One measured point per concurrency with a TPOT figure: its TPOT (the first figure's; consistent ones agree
    within their noise) and the measured output tok/s when one was given."""
    out = []
    for c in sorted({f.concurrency for f, _ in prob.tpot}):
        mine = [(f, t) for f, t in prob.tpot if f.concurrency == c]
        direct = [(f, t) for f, t in mine if f.metric == "tpot"] or mine
        _, t0 = direct[0]
        outputs = [f for f in prob.outputs if f.concurrency == c]
        names = dict.fromkeys([*(f.text for f, _ in mine), *(f.text for f in outputs)])
        out.append(MeasuredPoint(c, t0, outputs[0].value_si if outputs else None, tuple(names)))
    return tuple(out)
