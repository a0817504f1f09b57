"""A deployment calibrated on the figures its owner measured: physical knobs, one term of the step each, fitted with
priors (calibrate.terms), each said with the figures that identified it.

What the figures are: TPOT and output tok/s at a concurrency (its load), TTFT, and shares of a kernel class or a
collective in a decode step (`allreduce_share=0.515@c1`). Each is modelled at its own concurrency and lengths, so a
share at c1 speaks for the small messages of c1 (the collective's per-call latency) and a throughput at c128 for the
terms a big batch grows (routed-expert reads, collective bandwidth, KV): calibrate.terms fits the knobs the figures
are sensitive to, leaves the rest at their priors and says which figure set which knob and which knobs could not be
separated. The calibrated scenario is priced on the roofline with the knobs set (the measured per-op curves of other
boxes are replaced by the user's own figures).
Checks before the fit: figures measured at other lengths (beyond LENGTH_TOLERANCE) are refused, or, read from a
result file, set aside with a note (the file's other runs may match); figures that contradict each other are refused
with both and the residual (calibrate.consistency); a TPOT faster than the decode step's physical floor and a share
outside (0, 1) or of a class the model does not price are refused with why. ITL, E2E and request-rate figures are set
aside with the reason. k knobs set by k numbers reproduce them by construction ("fitted, not validated"); more
numbers than knobs leave residuals, listed.
Does not: read files (calibrate.inputs), restate points (calibrate.measured) or plan (planner).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from servescope.analysis.vocab import COLLECTIVES
from servescope.calibrate.consistency import contradictions
from servescope.calibrate.figures import SPEC_METRICS, Figure
from servescope.calibrate.knob_solve import (
    CLASS_KNOBS,
    COLLECTIVE_SHARES,
    COMM,
    FIXED_TERMS,
    Problem,
    share_name,
)
from servescope.calibrate.levels import Levels
from servescope.calibrate.terms import LOAD_METRICS, TermFit, fit_terms
from servescope.errors import MeasurementError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint, predict
from servescope.perfmodel.step import decode_step

__all__ = ["COMM", "FIXED_TERMS", "FigureFit", "Knob", "MeasuredPoint", "fit_figures"]

LENGTH_TOLERANCE = 0.05  # a figure's isl/osl may differ from the scenario's by this share (a result file's means)
MIN_TTFT_LOADS = 2  # TTFT figures calibrate (prefill, front end) from this many concurrencies (held-out evidence)
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
    """The calibration of a deployment on figures (module docstring). `apply` prices a scenario as calibrated (the
    knobs set on the roofline); `multipliers` are 1 on every term (the knobs live in the scenario's efficiency)."""

    levels: Levels = field(default_factory=Levels)
    terms: TermFit | None = None
    knobs: tuple[Knob, ...] = ()
    used: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    numbers: int = 0
    points: tuple[MeasuredPoint, ...] = ()
    residuals: tuple[tuple[str, float], ...] = ()  # (figure, calibrated/measured − 1) of every figure used
    shares: tuple[tuple[str, int, float], ...] = ()  # (share name, concurrency, measured share) fitted
    spec: tuple[Figure, ...] = ()  # spec_gain / spec_tpot figures: the planner calibrates the speculative track on them
    # True when a profiled trace speaks through its shares here (calibrate.profiled): the trace's absolute
    # calibration is then not applied under this fit
    replaces_trace: bool = False

    @property
    def calibrated(self) -> bool:
        return self.terms is not None

    @property
    def free_knobs(self) -> int:
        """Knobs the figures moved and that are not held at a physical bound (a bound knob is pinned, not fitted)."""
        if self.terms is None:
            return len(self.knobs)
        return sum(1 for k in self.terms.knobs if k.status in ("set", "partly set"))

    @property
    def validated(self) -> bool:
        """More numbers than free knobs: the residuals say something; k knobs from k numbers do not."""
        return self.numbers > self.free_knobs

    @property
    def case(self) -> str:
        """The held-out range case (specs/data/calibrated_ranges.json): the number of load points calibrated on."""
        n = self.levels.tpot_points
        return "uncalibrated" if n == 0 else "calibrated_1pt" if n == 1 else "calibrated_2pt"

    def status(self) -> str:
        """"fitted, not validated (k knobs from n numbers)" or what the extra numbers say; a figure the knobs did not
        reproduce (beyond REPRODUCED: a bound held them) is named with its residual either way."""
        k, n = self.free_knobs, self.numbers
        worst = max(self.residuals, key=lambda fr: abs(fr[1]), default=("", 0.0))
        unit = " (share points)" if "_share=" in worst[0] else ""
        missed = f"; not reproduced: {worst[0]} {worst[1]:+.1%}{unit}" if abs(worst[1]) > REPRODUCED else ""
        if not self.validated:
            return f"fitted, not validated ({k} knob{'s' * (k != 1)} from {n} number{'s' * (n != 1)}){missed}"
        return f"{k} knob{'s' * (k != 1)} from {n} numbers: largest residual {abs(worst[1]):.1%}"

    def apply(self, sc: Scenario) -> Scenario:
        """The scenario priced as calibrated (calibrate.terms.TermFit.apply)."""
        return self.terms.apply(sc) if self.terms is not None else sc

    def multipliers(self) -> dict[str, float]:
        """Decode level per perfmodel term: 1 (the knobs are in the scenario)."""
        return term_levels()

    def class_multipliers(self) -> dict[str, float]:
        """Decode level per kernel class: 1 (the knobs are in the scenario)."""
        return {c: 1.0 for c in (COMM, "gemm", "moe", "attention", "kernel_overhead", "host")}

    def measured_at(self, concurrency: int) -> MeasuredPoint | None:
        """The measured point at this concurrency when the calibration reproduces it (its figures within
        REPRODUCED): the plan's baseline there is the measurement."""
        p = next((p for p in self.points if p.concurrency == concurrency), None)
        res = dict(self.residuals)
        if p is None or any(abs(res.get(f, 0.0)) > REPRODUCED for f in p.figures):
            return None
        return p


def term_levels() -> dict[str, float]:
    from servescope.perfmodel.step import TERMS

    return dict.fromkeys(TERMS, 1.0)


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
    return f"{f.metric} does not set a knob (its boundary — queue, host gaps, delivery — is not a term of the step)"


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
    fitted = _fitted(prob)
    if not fitted:
        return FigureFit(notes=tuple(prob.notes), spec=tuple(prob.spec))
    return replace(_result(prob, fitted, fit_terms(sc, fitted)), spec=tuple(prob.spec))


def _fitted(prob: Problem) -> list[Figure]:
    """The figures the knobs are fitted to: the TPOT of every load point (an output figure's implied TPOT where no
    TPOT was measured there), TTFT from MIN_TTFT_LOADS concurrencies, and one share per name and load."""
    seen: set[tuple[str, int, str]] = set()
    out: list[Figure] = []
    ttft = prob.ttft if len({f.concurrency for f in prob.ttft}) >= MIN_TTFT_LOADS else []
    if prob.ttft and not ttft:
        prob.notes.append(f"{', '.join(f.described() for f in prob.ttft)}: not used to calibrate (one TTFT load "
                          "point raised held-out TTFT error on the dev series, 33.2 % → 38.4 %; two or more lower it, "
                          "29.5 % → 22.6 %: data-build/calibrated_ranges.py)")
    # an output figure is fitted as the TPOT it implies (its E2E less the modelled TTFT, per output token: an open
    # loop's output is its arrival rate, so only the latency it implies at its Little's-law concurrency is a figure)
    loads = [f if f.metric == "tpot" else replace(f, metric="tpot", value_si=t) for f, t in prob.tpot]
    for f in [*loads, *ttft, *prob.shares]:
        key = (f.metric, f.concurrency, f.text)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


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
    prob = Problem(sc, at, [], [], [], [f for f in figures if f.metric == "output"],
                   [f for f in figures if f.metric == "ttft"])
    for f in figures:
        got = implied(f) if f.metric == "output" else None
        value = f.value_si if f.metric == "tpot" else got[0] if got is not None else None
        if f.metric == "tpot" and value is not None:
            _check_floor(f, value, at[f.concurrency])
            prob.tpot.append((f, value))
        elif f.metric == "output" and value is not None and not any(g.metric == "tpot" and g.concurrency ==
                                                                     f.concurrency for g in figures):
            prob.tpot.append((f, value))  # the measured point's TPOT (the output itself is what is fitted)
        elif f.is_share and not any(g.metric == f.metric and g.concurrency == f.concurrency for g in prob.shares):
            _check_share(f)
            _check_priced(f, sc, at[f.concurrency])
            prob.shares.append(f)
        elif f.is_share:
            prob.notes.append(f"{f.described()}: agrees with the first {f.metric} at c{f.concurrency} within the "
                              "noise; the first is used")
        elif f.metric in SPEC_METRICS:
            prob.spec.append(f)
        elif f.metric not in (*LOAD_METRICS, "ttft") and not f.source:
            prob.notes.append(f"{f.described()}: not used to calibrate ({_why_not(f)})")
    for source in dict.fromkeys(f.source for f in figures if f.source):
        unused = [f.metric for f in figures if f.source == source and not f.is_share
                  and f.metric not in (*LOAD_METRICS, "ttft", *SPEC_METRICS)]
        if unused:
            prob.notes.append(f"{source}: {', '.join(unused)} not used to calibrate (no term of the step sets them)")
    return prob


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

def _check_priced(f: Figure, sc: Scenario, p: ServingPoint) -> None:
    """A share of something the model's decode step at that concurrency does not have is a layout or model mismatch,
    not a knob to fit: refused with what the step has."""
    name = share_name(f)
    d = decode_step(sc, p.batch, int(sc.decode_context))
    if name in (COMM, *CLASS_KNOBS):
        if d.class_time_s.get(name, 0.0) > 0:
            return
        what = f"no {name} kernels"
    else:
        if name in d.collectives and d.collectives[name].time_s > 0:
            return
        what = f"no {name} (its collectives: {', '.join(d.collectives) or 'none'})"
    raise MeasurementError(f"{f.described()}: the model's decode step at c{f.concurrency} has {what}; check the "
                           "layout (--tp/--ep/--dp) or the model")


# --- the result ----------------------------------------------------------------------------------------------


def _result(prob: Problem, fitted: list[Figure], terms: TermFit) -> FigureFit:
    loads = {f.concurrency for f, _ in prob.tpot}
    levels = Levels(tpot_points=len(loads), ttft_points=len(prob.ttft), basis="calibrated by term")
    knobs = tuple(Knob(k.knob.name, k.theta, f"{k.knob.what}; {k.status}", k.inputs)
                  for k in terms.knobs if k.status != "prior")
    notes = list(prob.notes)
    prior = [k.knob.name for k in terms.knobs if k.status == "prior"]
    if prior:
        notes.append(f"left at their priors (no figure given is sensitive to them): {', '.join(prior)}")
    for a, b, rho in terms.unseparated:
        notes.append(f"{a} and {b} could not be separated (posterior correlation {rho:+.2f}): the same figures move "
                     "both; their split follows the priors")
    shares = tuple((share_name(f), f.concurrency, f.value_si) for f in prob.shares)
    return FigureFit(levels, terms, knobs, tuple(f.text for f in fitted), tuple(notes), len(fitted), _points(prob),
                     terms.residuals, shares)


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
