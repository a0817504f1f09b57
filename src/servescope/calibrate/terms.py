"""Calibration by physical term: knobs that each move one term of the step, fitted to the user's figures with a
prior, so that more measurements make the answer better, never worse (issue 26).

Knobs (specs/data/calibration_priors.toml, a source per spread): per-step host/launch cost; dense weight-read
efficiency; routed-expert read efficiency (its bytes scale with the experts a batch touches, so the knob's effect
grows with the batch); KV reads; FLOPs; collective per-call latency and collective bandwidth, separately; prefill
compute and per-request front-end time (TTFT). A knob θ multiplies its term's time: rate fields ÷ θ, time fields × θ.
The fit: minimise  Σ_f ((m_f(θ) − y_f) / σ_f)² + Σ_k (ln θ_k / τ_k)²  over ln θ within each knob's physical bounds
(no efficiency above the datasheet peak, no collective call below its measured isolated latency), Gauss–Newton with
numerical derivatives. m_f is ln of a TPOT, TTFT or output tok/s figure, or the logit of a share, each at its own
concurrency and lengths; σ_f the figure's noise (stated, else FIGURE_NOISE); τ_k the prior's spread. So a share at
c1 moves the knob its small messages are sensitive to (the latency), and a c128 throughput the ones a big batch is
(expert reads, bandwidth); what no figure is sensitive to stays at its prior.
What each figure identified comes from the posterior: a knob whose posterior spread is under IDENTIFIED × its
prior's was set by the figures holding most of its information; two moved knobs whose posterior correlation exceeds
UNSEPARATED could not be separated (the same figures move both; the split follows their priors).
The solver (calibrate.term_solve): Gauss–Newton with Broyden updates.
Figures no setting reaches within twice their noise (`reach`) are refused (MeasurementError) with the closest knob
values, each residual and the knobs held at a bound; a smaller miss is kept, listed as the figure's residual.
Does not: parse or sort figures (calibrate.figures, calibrate.figure_fit), or word the result for a reader (report).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from servescope.calibrate.consistency import ASSUMED_NOISE
from servescope.calibrate.figures import Figure
from servescope.calibrate.term_solve import gauss_newton
from servescope.errors import BadConfig, MeasurementError
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.efficiency import Efficiency, roofline_efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingParts, combine_serving, output_tok_s, serving_parts
from servescope.perfmodel.step import step_parts
from servescope.perfmodel.step_types import StepParts
from servescope.specs import tables

# a figure without a stated noise is held to the precision it is typed with: three significant digits (12.1 ms is
# ±0.05 ms, 0.4 %), so the fit reproduces it and the priors only choose between the settings that do (shares: 0.005)
FIGURE_NOISE = 0.005
REACH = 0.03  # the least relative miss (and 3 σ) at which a figure is unreachable by the knobs (see `reach`)
IDENTIFIED = 0.5  # posterior sd / prior sd below this: the knob was set by the figures
PRIOR_ONLY = 0.9  # at or above this: the figures say nothing about it
MOVED = 0.05  # |ln θ| above this: the fit moved the knob (through the others at their bounds), not its prior
UNSEPARATED = 0.7  # |posterior correlation| of two moved knobs above this: not separated
MAX_THETA = 50.0  # no term 50× slower or faster than modelled
LOAD_METRICS = ("tpot", "output")
FITTED_METRICS = (*LOAD_METRICS, "ttft")


@dataclass(frozen=True)
class TermKnob:
    """One physical knob: the step term it moves, the Efficiency fields, its prior spread and bounds."""

    name: str
    term: str
    what: str
    time_fields: tuple[str, ...]  # × θ
    rate_fields: tuple[str, ...]  # ÷ θ
    log_sd: float
    max_rate: float | None = None
    min_value: float | None = None
    source: str = ""

    def bounds(self, eff: Efficiency) -> tuple[float, float]:
        """(lowest, highest) θ the physics allows on `eff`."""
        lo = 1.0 / MAX_THETA
        if self.rate_fields and self.max_rate is not None:
            lo = max(lo, max(getattr(eff, f) for f in self.rate_fields) / self.max_rate)
        if self.time_fields and self.min_value is not None:
            lo = max(lo, max(self.min_value / max(getattr(eff, f), 1e-30) for f in self.time_fields))
        return min(lo, 1.0), MAX_THETA


def _range_sd(case_key: str) -> float:
    q10, q90 = tables.error_ranges()["cases"]["system_unseen"][case_key]
    return math.log(float(q90) / float(q10)) / 2.563


_KNOB_KEYS = {"term", "what", "time_fields", "rate_fields", "log_sd", "log_sd_source", "max_rate", "max_rate_source",
              "min_value"}


@cache
def term_knobs() -> tuple[TermKnob, ...]:
    """The knobs of specs/data/calibration_priors.toml, in file order."""
    doc = tables.read_toml("calibration_priors.toml")
    out = []
    for name, k in doc.get("knob", {}).items():
        sd = k.get("log_sd")
        sd = _range_sd(sd.removesuffix("_range")) if isinstance(sd, str) else float(sd)
        unknown = set(k) - _KNOB_KEYS
        if unknown or not sd > 0 or not (k.get("time_fields") or k.get("rate_fields")):
            raise BadConfig(f"specs/data/calibration_priors.toml: knob {name!r} needs time_fields or rate_fields "
                            f"and log_sd > 0{'; unknown keys ' + ', '.join(sorted(unknown)) if unknown else ''}")
        out.append(TermKnob(name, str(k["term"]), str(k["what"]), tuple(k.get("time_fields", ())),
                            tuple(k.get("rate_fields", ())), sd,
                            k.get("max_rate"), k.get("min_value"),
                            str(k.get("log_sd_source", "specs/data/ranges.json: the model's cross-validated spread"))))
    return tuple(out)


def set_knobs(eff: Efficiency, theta: dict[str, float]) -> Efficiency:
    """`eff` with each knob's fields moved by its θ (time fields × θ, rate fields ÷ θ)."""
    by_name = {k.name: k for k in term_knobs()}
    changes: dict[str, float] = {}
    for name, t in theta.items():
        k = by_name[name]
        changes |= {f: getattr(eff, f) * t for f in k.time_fields}
        changes |= {f: getattr(eff, f) / t for f in k.rate_fields}
    return eff.scaled(**changes) if changes else eff


# --- what the model says a figure is --------------------------------------------------------------------------------


def share_key(f: Figure) -> str:
    """The combine_step key of a share figure: a class (gemm, moe, attention, communication) or coll:<internal
    collective key> (the printed `gather_logits` is `all_gather:logits` inside: perfmodel.step.public_name)."""
    name = f.metric.removesuffix("_share")
    if name in ("gemm", "moe", "attention", "communication"):
        return name
    return "coll:" + ("all_gather:logits" if name == "gather_logits" else name)


class Observer:
    """The efficiency-free parts behind every figure, built once; `model(eff)` is each figure's modelled value."""

    def __init__(self, figures: tuple[Figure, ...], sc: Scenario, concurrencies: tuple[int, ...]) -> None:
        self.figures, self.sc = figures, sc
        self.index = {c: i for i, c in enumerate(concurrencies)}
        self.serving: ServingParts = serving_parts(sc, list(concurrencies))
        cap = float(np.asarray(self.serving.cap).ravel()[0])
        self.steps: dict[int, StepParts] = {f.concurrency: step_parts(sc, min(f.concurrency, cap), sc.decode_context, 1)
                                            for f in figures if f.is_share}

    def model(self, eff: Efficiency) -> np.ndarray:
        """Each figure's modelled value (s, tok/s or a share) under `eff`."""
        a = combine_serving(self.serving, eff)
        decoded = {c: combine_step(parts, eff) for c, parts in self.steps.items()}
        out = np.empty(len(self.figures))
        for j, f in enumerate(self.figures):
            if f.is_share:
                d, key = decoded[f.concurrency], share_key(f)
                out[j] = float(np.asarray(d[key]).ravel()[0]) / float(np.asarray(d["step"]).ravel()[0]) \
                    if key in d else 0.0
            elif f.metric == "output":
                p = self.serving
                out[j] = float(np.asarray(output_tok_s(p.concurrency, p.cap, self.sc.osl, a["ttft_s"],
                                                       a["tpot_s"])).ravel()[self.index[f.concurrency]])
            else:
                out[j] = float(np.asarray(a[f.metric + "_s"]).ravel()[self.index[f.concurrency]])
        return out


def fit_space(figures: Sequence[Figure], values: np.ndarray) -> np.ndarray:
    """ln of a latency or rate, logit of a share."""
    out = np.empty(len(values))
    for j, (f, v) in enumerate(zip(figures, values, strict=True)):
        if f.is_share:
            s = min(max(float(v), 1e-9), 1 - 1e-9)
            out[j] = math.log(s / (1 - s))
        else:
            out[j] = math.log(max(float(v), 1e-30))
    return out


def noise(f: Figure) -> float:
    """σ of a figure in fit space: its stated noise (a fraction), else FIGURE_NOISE; a share's in logit units."""
    n = f.noise if f.noise is not None and f.noise > 0 else FIGURE_NOISE / (f.value_si if f.is_share else 1.0)
    if f.is_share:
        s = f.value_si
        return max(n * s / (s * (1 - s)), 1e-4)
    return max(n, 1e-4)


def reach(f: Figure) -> float:
    """How far the fit may miss a figure (relative) before it is refused: twice its noise, the stated one or the
    between-run noise calibrate.consistency assumes for figures from different runs (ASSUMED_NOISE: day, client,
    load, a profiler on or off), and at least REACH."""
    return max(REACH, 2.0 * (f.noise if f.noise is not None else ASSUMED_NOISE))


# --- the fit ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnobResult:
    """One knob after the fit: θ, prior and posterior spread of ln θ, whether it sits at a bound, the figures that
    set it (most information first) and its status: set | partly set (some information, or moved because other
    knobs sit at their bounds) | prior | at its physical bound."""

    knob: TermKnob
    theta: float
    prior_sd: float
    post_sd: float
    at_bound: str  # "" | "low" | "high"
    inputs: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.at_bound:
            return "at its physical bound"
        ratio = self.post_sd / self.prior_sd
        if ratio < IDENTIFIED:
            return "set"
        moved = abs(math.log(self.theta)) > MOVED
        return "partly set" if ratio < PRIOR_ONLY or moved else "prior"


@dataclass(frozen=True)
class TermFit:
    """The knobs fitted to the figures, what each figure identified, and the residuals."""

    knobs: tuple[KnobResult, ...]
    residuals: tuple[tuple[str, float], ...]  # (figure text, modelled/measured − 1; shares in share points)
    unseparated: tuple[tuple[str, str, float], ...]  # (knob, knob, posterior correlation)

    @property
    def theta(self) -> dict[str, float]:
        return {k.knob.name: k.theta for k in self.knobs}

    def apply(self, sc: Scenario) -> Scenario:
        """`sc` priced as calibrated: from roofline_start, the knobs set."""
        sc = roofline_start(sc)
        moved = {n: t for n, t in self.theta.items() if t != 1.0}
        return sc.with_(efficiency=set_knobs(sc.efficiency, moved)) if moved else sc


def roofline_start(sc: Scenario) -> Scenario:
    """The scenario the knobs move: the measured per-op and GEMM-efficiency curves off (the user's figures replace
    other boxes' curves; every knob then has the datasheet as its bound) and, where curves priced it, the knob fields
    at the fit's [roofline] stage, which was fitted with the per-op curves off."""
    eff = sc.efficiency
    if eff.op_curves <= 0.5 and eff.moe_curve <= 0.5 and eff.gemm_curve <= 0.5:
        return sc
    base = roofline_efficiency() if eff.op_curves > 0.5 else eff
    fields = {f for k in term_knobs() for f in (*k.time_fields, *k.rate_fields) if k.term != "ttft"}
    return sc.with_(efficiency=eff.scaled(op_curves=0.0, moe_curve=0.0, gemm_curve=0.0,
                                          **{f: getattr(base, f) for f in fields}))


def fit_terms(sc: Scenario, figures: Sequence[Figure]) -> TermFit:
    """Fit the knobs to `figures` (module docstring) from roofline_start(sc);
    MeasurementError when a figure cannot be reached."""
    knobs = term_knobs()
    sc = roofline_start(sc)
    obs = Observer(tuple(figures), sc, tuple(sorted({f.concurrency for f in figures if not f.is_share})))
    y = fit_space(figures, np.array([f.value_si for f in figures]))
    sig = np.array([noise(f) for f in figures])
    tau = np.array([k.log_sd for k in knobs])
    bounds = np.array([k.bounds(sc.efficiency) for k in knobs])
    lo, hi = np.log(bounds[:, 0]), np.log(bounds[:, 1])

    def resid(x: np.ndarray) -> np.ndarray:
        eff = set_knobs(sc.efficiency, {k.name: math.exp(v) for k, v in zip(knobs, x, strict=True)})
        out: np.ndarray = (fit_space(figures, obs.model(eff)) - y) / sig
        return out

    x = np.clip(np.zeros(len(knobs)), lo, hi)
    x, r, jac = gauss_newton(resid, x, tau, lo, hi)
    return _result(knobs, figures, obs, sc, x, r, jac, tau, lo, hi, sig)


def _result(knobs: tuple[TermKnob, ...], figures: Sequence[Figure], obs: Observer, sc: Scenario, x: np.ndarray,
            r: np.ndarray, jac: np.ndarray, tau: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            sig: np.ndarray) -> TermFit:
    theta = {k.name: math.exp(v) for k, v in zip(knobs, x, strict=True)}
    modelled = obs.model(set_knobs(sc.efficiency, theta))
    residuals = tuple((f.text, float((m - f.value_si) if f.is_share else m / f.value_si - 1.0))
                      for f, m in zip(figures, modelled, strict=True))
    at = ["low" if v <= lo[i] + 1e-9 else "high" if v >= hi[i] - 1e-9 else "" for i, v in enumerate(x)]
    _check_reach(figures, residuals, r, jac, knobs, theta, at)
    free = np.array([not b for b in at])
    cov = np.zeros((len(knobs), len(knobs)))  # a knob held at a bound is pinned there: no spread
    a = jac[:, free]
    cov[np.ix_(free, free)] = np.linalg.inv(a.T @ a + np.diag(1.0 / tau[free] ** 2))
    post = np.sqrt(np.diag(cov))
    results = []
    without = _spread_without_each(jac, tau, free)
    for i, k in enumerate(knobs):
        results.append(KnobResult(k, theta[k.name], float(tau[i]), float(post[i]), at[i],
                                  _inputs(figures, jac[:, i], without[:, i], float(post[i]))))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.nan_to_num(cov / np.outer(post, post))
    pairs = tuple((knobs[i].name, knobs[j].name, float(corr[i, j]))
                  for i in range(len(knobs)) for j in range(i + 1, len(knobs))
                  if abs(corr[i, j]) > UNSEPARATED and abs(x[i]) > 0.01 and abs(x[j]) > 0.01)
    return TermFit(tuple(results), residuals, pairs)


def _spread_without_each(jac: np.ndarray, tau: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Posterior sd of each knob (columns) with each figure (rows) left out: what that figure pinned."""
    out = np.zeros(jac.shape)
    for j in range(jac.shape[0]):
        a = np.delete(jac, j, axis=0)[:, free]
        cov = np.linalg.inv(a.T @ a + np.diag(1.0 / tau[free] ** 2))
        out[j, free] = np.sqrt(np.diag(cov))
    return out


def _inputs(figures: Sequence[Figure], jac_k: np.ndarray, without_k: np.ndarray, post: float) -> tuple[str, ...]:
    """The figures that set a knob: those without which its posterior spread would grow by half or more (most
    first); where several pin it redundantly, those holding ≥ 20 % of its information."""
    grow = without_k / max(post, 1e-12)
    pinned = [j for j in np.argsort(-grow) if grow[j] >= 1.5]
    if not pinned:
        info = jac_k**2
        total = float(info.sum())
        pinned = [j for j in np.argsort(-info) if total > 0 and info[j] >= 0.2 * total]
    return tuple(figures[j].text for j in pinned)


def _check_reach(figures: Sequence[Figure], residuals: tuple[tuple[str, float], ...], r: np.ndarray,
                 jac: np.ndarray, knobs: tuple[TermKnob, ...], theta: dict[str, float], at: list[str]) -> None:
    bad = [(f, res) for (f, (_, res)), rj in zip(zip(figures, residuals, strict=True), r, strict=True)
           if abs(res) / (f.value_si if f.is_share else 1.0) > reach(f) and abs(rj) > 3.0]
    if not bad:
        return
    parts = []
    for f, res in bad:
        j = figures.index(f)
        held = [k.name for i, k in enumerate(knobs) if at[i] and jac[j, i] != 0]
        why = (f"{', '.join(held)} held at {'their' if len(held) > 1 else 'its'} physical bound"
               if held else "no knob moves it further without missing the others")
        unit = "share points" if f.is_share else "of the figure"
        parts.append(f"{f.described()} is missed by {res:+.1%} {unit} ({why})")
    closest = ", ".join(f"{n} ×{t:.3g}" for n, t in theta.items() if abs(t - 1.0) > 1e-3) or "none moved"
    raise MeasurementError("figures no knob setting reaches: " + "; ".join(parts) + f" — the closest knobs: {closest}")
