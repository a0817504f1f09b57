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
construction ("fitted, not validated"); more numbers than knobs leave residuals, listed. The solve
(calibrate.knob_solve): the levels by least squares (calibrate.levels) inside a Newton iteration on the share
knobs (logit of each share against log K, numerical derivative). Figures that contradict each other are refused with both and the residual
(calibrate.consistency); a TPOT faster than the decode step's physical floor, a share below its collective's latency
floor or needing an efficiency above the datasheet peak are refused with the floor. TTFT, ITL, E2E and request-rate
figures are set aside with the reason (a TTFT level measured at other concurrencies raised held-out TTFT error,
calibrate.held_out). A figure measured at other lengths (beyond LENGTH_TOLERANCE) is refused, or, read from a
result file, set aside with a note (the file's other runs may match).
Does not: read files (calibrate.inputs), restate points (calibrate.measured) or plan (planner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from servescope.analysis.vocab import COLLECTIVES
from servescope.calibrate.consistency import contradictions
from servescope.calibrate.figures import Figure
from servescope.calibrate.knob_solve import (
    CLASS_KNOBS,
    COLLECTIVE_SHARES,
    COMM,
    FIXED_TERMS,
    Problem,
    State,
    class_multipliers,
    decode_at,
    knobbed,
    share_name,
    solve,
    term_multipliers,
)
from servescope.calibrate.levels import Levels
from servescope.errors import MeasurementError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.perfmodel.step import decode_step

__all__ = ["COMM", "FIXED_TERMS", "FigureFit", "Knob", "MeasuredPoint", "fit_figures", "knobbed"]

LENGTH_TOLERANCE = 0.05  # a figure's isl/osl may differ from the scenario's by this share (a result file's means)
REPRODUCED = 0.01  # a measured TPOT the calibration reproduces this closely is the plan's baseline ("measured")


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
        return term_multipliers(self.levels)

    def class_multipliers(self) -> dict[str, float]:
        """Decode level per kernel class (StepPrediction.class_time_s): communication 1; gemm and moe the fixed
        level (at decode they read weights), attention the per-batch level, norm and other (launches, CPU) the
        fixed level. Exact with one level; with two an approximation for a class that is compute-bound."""
        return class_multipliers(self.levels)

    def measured_at(self, concurrency: int) -> MeasuredPoint | None:
        """The measured point at this concurrency when the calibration reproduces it (its TPOT figures within
        REPRODUCED): the plan's baseline there is the measurement."""
        p = next((p for p in self.points if p.concurrency == concurrency), None)
        res = dict(self.residuals)
        if p is None or any(abs(res.get(f, 0.0)) > REPRODUCED for f in p.figures):
            return None
        return p


def _length_problem(sc: Scenario, f: Figure) -> str | None:
    def off(given: int | None, have: int) -> bool:
        return given is not None and abs(given - have) > LENGTH_TOLERANCE * have

    if off(f.isl, sc.isl) or off(f.osl, sc.osl):
        given = ", ".join(f"{k.upper()} {v}" for k, v in (("isl", f.isl), ("osl", f.osl)) if v is not None)
        fix = " ".join(f"--{k} {v}" for k, v in (("isl", f.isl), ("osl", f.osl)) if v is not None)
        return (f"{f.described()}: measured at {given}, the scenario has ISL {sc.isl} / OSL {sc.osl}; pass "
                f"{fix} to match")
    return None


def _why_not(f: Figure) -> str:
    if f.metric == "ttft":
        return "TTFT is kept as modelled: a TTFT level measured at other concurrencies raised held-out TTFT error"
    if f.metric == "output":
        return "a TPOT figure at the same concurrency is used instead"
    return f"{f.metric} does not set a knob"

def fit_figures(sc: Scenario, figures: Sequence[Figure]) -> FigureFit:
    """Fit the knobs the figures identify (module docstring); MeasurementError (one line) for figures that
    contradict each other, cannot be reached by the physics, or were measured at other lengths."""
    if not figures:
        return FigureFit()
    kept, aside = [], []
    for f in figures:
        if (bad := _length_problem(sc, f)) is None:
            kept.append(f)
        elif f.source:  # a result file's run at other lengths: set aside, the file's other runs may match
            aside.append(bad.replace(f.described(), f.source, 1))
        else:
            raise MeasurementError(bad)
    aside = [f"{n}; set aside" for n in dict.fromkeys(aside)]  # one note per run
    if not kept:
        return FigureFit(notes=tuple(aside))
    prob = _sort(sc, kept)
    prob.notes = [*aside, *prob.notes]
    if not prob.tpot and not prob.shares:
        return FigureFit(notes=tuple(prob.notes))
    levels, comm, classes = solve(prob)
    return _result(prob, levels, comm, classes)


def _sort(sc: Scenario, figures: Sequence[Figure]) -> Problem:
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
        elif not f.source:  # a result file's other metrics are listed once per run (below)
            notes.append(f"{f.described()}: not used to calibrate ({_why_not(f)})")
    for source in dict.fromkeys(f.source for f in figures if f.source):
        unused = [f.metric for f in figures if f.source == source and f.metric not in ("tpot", "output")]
        if unused:
            notes.append(f"{source}: {', '.join(unused)} not used to calibrate (a TPOT level is what a run sets; "
                         "TTFT is kept as modelled)")
    outputs = [f for f in figures if f.metric == "output"]
    return Problem(sc, at, tpot, shares, notes, outputs)


def _check_floor(f: Figure, tpot_s: float, p: ServingPoint) -> None:
    if tpot_s < p.floor_s:
        raise MeasurementError(f"{f.described()}: a TPOT of {tpot_s * 1e3:.3g} ms is faster than the physical floor "
                               f"of this decode step ({p.floor_s * 1e3:.3g} ms at batch {p.batch}): check the scenario "
                               "(model, GPU, layout, quantization) or the figure")


def _check_share(f: Figure) -> None:
    name = share_name(f)
    if name not in COLLECTIVE_SHARES and name not in CLASS_KNOBS:
        known = ", ".join(f"{n}_share" for n in (COMM, *CLASS_KNOBS, *COLLECTIVES))
        raise MeasurementError(f"{f.text}: the model prices no kernel time of class {name} (it counts such kernels' "
                               f"launches as overhead); shares that calibrate: {known}")
    if not 0.0 < f.value_si < 1.0:
        raise MeasurementError(f"{f.text}: a share of {f.value_si:g} leaves nothing to split; give one strictly "
                               "between 0 and 1")

# --- the result ----------------------------------------------------------------------------------------------


def _result(prob: Problem, levels: Levels, comm: float, classes: dict[str, float]) -> FigureFit:
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
                     _points(prob), tuple(residuals), tuple((share_name(f), f.concurrency, f.value_si)
                                                            for f in prob.shares))


def _check_share_floors(prob: Problem, fit: FigureFit, sc: Scenario) -> None:
    """A collective share below the collective's latency floor, or a class share that needs an efficiency above
    the datasheet peak, is refused with the floor."""
    eff = sc.efficiency
    for f in prob.shares:
        name = share_name(f)
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
        now = decode_at(prob, State(fit.levels, fit.comm_scale, dict(fit.class_scales), sc), f.concurrency)
        have = now.class_time_s.get(COMM, 0.0) if name == COMM else float(now.collectives[name].time_s)
        if have < floor * (1 - 1e-9):
            raise MeasurementError(f"{f.text}: puts {name} at {have * 1e3:.3g} ms per decode step, below its "
                                   f"physical floor of {floor * 1e3:.3g} ms (its calls at the measured isolated "
                                   "latency): check the share or the TPOT")


def _knob_list(prob: Problem, levels: Levels, comm: float, classes: dict[str, float]) -> list[Knob]:
    tpots = tuple(f.text for f, _ in prob.tpot)
    out: list[Knob] = []
    for f in prob.shares:
        name = share_name(f)
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


def _points(prob: Problem) -> tuple[MeasuredPoint, ...]:
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
