"""What-ifs: composable changes to a scenario and its predicted decode step, and their evaluation.

Does: define `WhatIf` (a scenario change, a step adjustment, and/or speculative decoding) and evaluate a set
of them on the objective: TPOT at a concurrency, or output throughput under a TPOT limit. Scenario changes are
applied first (in the order given), then step adjustments on every predicted decode step (target, verify and
draft alike), then speculation: TPOT = (verify + draft + fixed) / AL, one iteration priced by
perfmodel.speculative (draft loop, CUDA-graph padding, sampling, rejection, host sync) on the adjusted steps.
Batch = concurrency (perfmodel splits it over dp ranks), capped at the memory limit; output tokens/s =
batch / TPOT.
Does not: decide which what-ifs make sense (planner.tracks_*), or price a step (servescope.perfmodel, reached
through the `StepModel` protocol so tests can use small fakes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.speculative import SpecIteration, SpecShape, draft_scenario, iteration
from servescope.perfmodel.step import StepPrediction
from servescope.planner.speculative import concurrency_grid


class StepModel(Protocol):
    """What the planner needs from the performance model."""

    def decode(self, scenario: Scenario, batch: int, context_len: float,
               tokens_per_seq: int = 1) -> StepPrediction: ...

    def prefill(self, scenario: Scenario, tokens: int, batch: int = 1, context_len: float = 0) -> StepPrediction: ...

    def max_concurrency(self, scenario: Scenario) -> int: ...

    def interference(self, scenario: Scenario, batch: int) -> float: ...

    def interference_share(self, scenario: Scenario, batch: int) -> float: ...

    def draft(self, scenario: Scenario, method: str, draft_model: str | None) -> Scenario | None: ...


class PerfModel:
    """The real analytical model (servescope.perfmodel)."""

    def decode(self, scenario: Scenario, batch: int, context_len: float, tokens_per_seq: int = 1) -> StepPrediction:
        from servescope.perfmodel import decode_step

        return decode_step(scenario, batch, context_len, tokens_per_seq=tokens_per_seq)  # type: ignore[arg-type]

    def prefill(self, scenario: Scenario, tokens: int, batch: int = 1, context_len: float = 0) -> StepPrediction:
        from servescope.perfmodel import prefill_step

        return prefill_step(scenario, tokens, batch=batch, context_len=context_len)  # type: ignore[arg-type]

    def max_concurrency(self, scenario: Scenario) -> int:
        """Sequences whose KV fits at the steady-state mean context isl + osl/2, as perfmodel.predict caps them."""
        from servescope.perfmodel import max_concurrency

        return max(1, int(max_concurrency(scenario, scenario.isl + scenario.osl / 2.0)))

    def interference(self, scenario: Scenario, batch: int) -> float:
        """TPOT above the decode step at `batch`: other requests' prefills, exactly as perfmodel.predict adds them
        (one formula, so `servescope model` and `servescope plan` agree on the baseline)."""
        from servescope.perfmodel import predict_arrays

        a = predict_arrays(scenario, [batch])
        return max(0.0, float(a["tpot_s"][0] - a["step"][0]))

    def interference_share(self, scenario: Scenario, batch: int) -> float:
        """Prompts' marginal prefill cost per decode step (the multiplier perfmodel.serving applies)."""
        from servescope.perfmodel import predict_arrays

        return float(predict_arrays(scenario, [batch])["interference_share"][0])

    def draft(self, scenario: Scenario, method: str, draft_model: str | None) -> Scenario | None:
        """The drafter's scenario for a speculative method (None: no drafter forward, e.g. n-gram)."""
        return draft_scenario(scenario, method, draft_model)


@dataclass(frozen=True)
class Collective:
    calls_per_step: float
    bytes_per_call: float
    time_s: float


@dataclass(frozen=True)
class StepView:
    """A predicted step reduced to what what-ifs adjust. Times in seconds."""

    step_time_s: float
    terms_s: dict[str, float]
    class_time_s: dict[str, float]
    collectives: dict[str, Collective]
    dominant: str
    floor_s: float
    tokens: int = 1  # tokens in the step over all dp ranks (batch × tokens per sequence)
    kind: str = "decode"  # "decode" | "prefill": adjustments measured on one step kind apply to that kind

    @classmethod
    def of(cls, pred: StepPrediction) -> StepView:
        colls = {
            name: Collective(float(c.calls_per_step), float(c.bytes_per_call), float(c.time_s))
            for name, c in pred.collectives.items()
        }
        return cls(
            step_time_s=float(pred.step_time_s),
            terms_s=dict(pred.terms_s),
            class_time_s=dict(pred.class_time_s),
            collectives=colls,
            dominant=str(pred.dominant),
            floor_s=float(pred.floor_s),
            tokens=max(1, int(pred.tokens)),
            kind=str(getattr(pred, "kind", "decode")),
        )

    def with_collective(self, name: str, new: Collective) -> StepView:
        """Replace one collective's cost; the saving comes off the communication term and the step."""
        old = self.collectives.get(name)
        delta = new.time_s - (old.time_s if old else 0.0)
        return self.shifted("communication", delta, collectives={**self.collectives, name: new})

    def shifted(self, term: str, delta_s: float, cls: str | None = None, **changes: Any) -> StepView:
        """Add `delta_s` (negative = saving) to one term, its kernel class (`cls`, default the term's name when
        it is also a class) and the step: the perfmodel's terms add up to the step."""
        terms = {**self.terms_s, term: max(0.0, self.terms_s.get(term, 0.0) + delta_s)}
        classes = dict(self.class_time_s)
        name = cls or term
        if name in classes:
            classes[name] = max(0.0, classes[name] + delta_s)
        # no clamp at floor_s: it prices the unadjusted collectives (a faster all-reduce lowers it too)
        step = max(0.0, self.step_time_s + delta_s)
        return replace(self, step_time_s=step, terms_s=terms, class_time_s=classes,
                       dominant=max(terms, key=lambda t: terms[t]), **changes)


# A step adjustment: a frozen dataclass of its parameters, called on (scenario, step) (planner.tracks_comm).
Adjust = Callable[[Scenario, StepView], StepView]


@dataclass(frozen=True)
class Change:
    """A scenario change as data, applied in one place (`apply`): the fields replaced (`Scenario.with_`), then the
    efficiency knobs set (`efficiency`), raised to at least (`efficiency_floor`) or lowered to at most
    (`efficiency_ceiling`) a value, in one `Efficiency.scaled`; `check_fits`: the new scenario must fit in memory
    (ScenarioError otherwise)."""

    fields: tuple[tuple[str, Any], ...] = ()
    efficiency: tuple[tuple[str, float], ...] = ()
    efficiency_floor: tuple[tuple[str, float], ...] = ()
    efficiency_ceiling: tuple[tuple[str, float], ...] = ()
    check_fits: bool = False

    @classmethod
    def of(cls, fields: dict[str, Any] | None = None, *, efficiency: dict[str, float] | None = None,
           efficiency_floor: dict[str, float] | None = None, efficiency_ceiling: dict[str, float] | None = None,
           check_fits: bool = False) -> Change:
        return cls(tuple((fields or {}).items()), tuple((efficiency or {}).items()),
                   tuple((efficiency_floor or {}).items()), tuple((efficiency_ceiling or {}).items()), check_fits)

    def apply(self, s: Scenario) -> Scenario:
        new = s.with_(**dict(self.fields)) if self.fields else s
        if self.efficiency or self.efficiency_floor or self.efficiency_ceiling:
            e = new.efficiency
            knobs = dict(self.efficiency)
            knobs |= {k: max(v, getattr(e, k)) for k, v in self.efficiency_floor}
            knobs |= {k: min(v, getattr(e, k)) for k, v in self.efficiency_ceiling}
            new = new.with_(efficiency=e.scaled(**knobs))
        if self.check_fits:
            from servescope.perfmodel.memory import check_fits

            check_fits(new)
        return new


@dataclass(frozen=True)
class SpecSetup:
    """Speculation as evaluated: what is drafted and verified (`shape`), the accepted length, and what drafts
    (`method`, `draft_model`: the step model makes the drafter's scenario, `StepModel.draft`)."""

    shape: SpecShape
    al: float
    method: str
    draft_model: str | None = None

    @property
    def k(self) -> int:
        return self.shape.k


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: evaluations are cached per what-if
class WhatIf:
    """One track's change, as data: a scenario change, a step adjustment and/or speculative decoding."""

    kind: str
    scenario: Change | None = None
    adjust: Adjust | None = None
    spec: SpecSetup | None = None
    exclusive: tuple[str, ...] = ()  # kinds this one cannot be combined with
    no_prefill_interference: bool = False  # decode runs on its own GPUs (PD disaggregation)


@dataclass(frozen=True)
class Outcome:
    """The objective's numbers under a set of what-ifs."""

    tpot_s: float
    output_tok_s: float
    concurrency: int
    step: StepView
    tokens_per_step: float = 1.0


@dataclass
class Evaluator:
    """Evaluates what-ifs on one scenario and objective, with the perfmodel's serving formula:

        TPOT = decode step at batch min(c, c_max), context isl + osl/2   (or the speculative formula)
               + prefill_interference · (b − 1)/osl · (prefill of isl tokens + prefill_overhead_s)

    Step predictions are cached by scenario identity (scenarios hold dicts and are not hashable)."""

    model: StepModel
    scenario: Scenario
    objective: str = "tpot"
    concurrency: int = 1
    tpot_limit_s: float | None = None
    base_adjusts: tuple[Adjust, ...] = ()  # planner refinements of the model applied to every step
    applied: tuple[WhatIf, ...] = ()  # tracks already applied (plan --applied): part of every evaluation
    _steps: dict[tuple[int, int, int], tuple[Scenario, StepView]] = field(default_factory=dict)
    _prefill: dict[int, tuple[Scenario, float]] = field(default_factory=dict)
    _max_c: dict[int, tuple[Scenario, int]] = field(default_factory=dict)
    _prompt: dict[tuple[int, int], tuple[Scenario, StepView, float]] = field(default_factory=dict)
    _scenarios: dict[tuple[WhatIf, ...], Scenario] = field(default_factory=dict)
    _drafts: dict[tuple[int, SpecSetup], tuple[Scenario, Scenario | None]] = field(default_factory=dict)

    def step(self, scenario: Scenario, batch: int, tokens_per_seq: int, adjusts: Iterable[Adjust]) -> StepView:
        key = (id(scenario), batch, tokens_per_seq)
        hit = self._steps.get(key)
        if hit is None or hit[0] is not scenario:
            ctx = scenario.decode_context
            hit = (scenario, StepView.of(self.model.decode(scenario, batch, ctx, tokens_per_seq)))
            self._steps[key] = hit
        view = hit[1]
        for fn in (*self.base_adjusts, *adjusts):
            view = fn(scenario, view)
        return view

    def max_concurrency(self, scenario: Scenario) -> int:
        hit = self._max_c.get(id(scenario))
        if hit is None or hit[0] is not scenario:
            hit = (scenario, self.model.max_concurrency(scenario))
            self._max_c[id(scenario)] = hit
        return hit[1]

    def interference_s(self, scenario: Scenario, batch: int) -> float:
        """Other requests' prefills landing in this request's decode, per output token (perfmodel serving)."""
        eff = scenario.efficiency
        if batch <= 1 or not eff.prefill_interference:
            return 0.0
        return float(self.model.interference(scenario, batch))

    def prompt_collective_delta_s(self, scenario: Scenario, batch: int, adjusts: Iterable[Adjust]) -> float:
        """What the step adjustments (a faster all-reduce path, NCCL tuning) change in the prompts' collectives that
        ride in the decode steps, per output token: the adjusted minus the modelled communication of one prefill of
        isl tokens, times the prompts per decode step (perfmodel serving). 0 without adjustments or prompts."""
        fns = tuple(adjusts)
        if not fns or batch <= 1 or scenario.decode_only:
            return 0.0
        key = (id(scenario), batch)
        hit = self._prompt.get(key)
        if hit is None or hit[0] is not scenario:  # one prefill step and one share per scenario and batch
            hit = (scenario, StepView.of(self.model.prefill(scenario, int(scenario.isl))),
                   self.model.interference_share(scenario, batch))
            self._prompt[key] = hit
        _, base, share = hit
        view = base
        for fn in fns:
            view = fn(scenario, view)
        delta = view.terms_s.get("communication", 0.0) - base.terms_s.get("communication", 0.0)
        return delta * share if delta else 0.0

    def prefill_s(self, scenario: Scenario) -> float:
        """One request's prefill (isl tokens) plus the per-prefill overhead, seconds."""
        hit = self._prefill.get(id(scenario))
        if hit is None or hit[0] is not scenario:
            t_pf = float(self.model.prefill(scenario, int(scenario.isl)).step_time_s)
            hit = (scenario, t_pf + scenario.efficiency.prefill_overhead_s)
            self._prefill[id(scenario)] = hit
        return hit[1]

    def scenario_of(self, whatifs: tuple[WhatIf, ...]) -> Scenario:
        sc = self._scenarios.get(whatifs)
        if sc is None:
            sc = self.scenario
            for w in (*self.applied, *whatifs):
                if w.scenario is not None:
                    sc = w.scenario.apply(sc)
            self._scenarios[whatifs] = sc
        return sc

    def _draft_of(self, spec: SpecSetup, sc: Scenario) -> Scenario | None:
        hit = self._drafts.get((id(sc), spec))
        if hit is None or hit[0] is not sc:
            hit = (sc, self.model.draft(sc, spec.method, spec.draft_model))
            self._drafts[(id(sc), spec)] = hit
        return hit[1]

    def iteration(self, spec: SpecSetup, sc: Scenario, batch: int, adjusts: Iterable[Adjust] = ()) -> SpecIteration:
        """One speculative iteration priced on this evaluator's (adjusted, cached) steps: perfmodel.speculative."""
        fns = tuple(adjusts)

        def step(scen: Scenario, b: int, tokens_per_seq: int) -> tuple[float, float]:
            view = self.step(scen, b, tokens_per_seq, fns)
            return view.step_time_s, view.class_time_s.get("host", 0.0)

        return iteration(sc, self._draft_of(spec, sc), batch, spec.shape, step)

    def at(self, whatifs: tuple[WhatIf, ...], concurrency: int) -> Outcome:
        """TPOT and throughput at one concurrency (batch capped at the memory limit, like perfmodel.predict)."""
        sc = self.scenario_of(whatifs)
        whatifs = (*self.applied, *whatifs)
        adjusts = [w.adjust for w in whatifs if w.adjust is not None]
        batch = max(1, min(concurrency, self.max_concurrency(sc)))
        extra = 0.0 if any(w.no_prefill_interference for w in whatifs) else self.interference_s(sc, batch)
        if extra > 0.0:  # the adjustments reach the prompts' collectives too (issue 18)
            extra = max(0.0, extra + self.prompt_collective_delta_s(sc, batch, adjusts))
        specs = [w.spec for w in whatifs if w.spec is not None]
        if not specs:
            view, al = self.step(sc, batch, 1, adjusts), 1.0
            tpot = view.step_time_s + extra
        else:
            spec = specs[0]
            view, al = self.step(sc, batch, spec.k + 1, adjusts), spec.al
            it = self.iteration(spec, sc, batch, adjusts)
            tpot = it.total_s / al + extra
        rate = batch / tpot
        if any(w.no_prefill_interference for w in whatifs):
            # a separate prefill pool: requests/s · prefill seconds = prefill instances per decode instance
            rate /= 1.0 + rate / sc.osl * self.prefill_s(sc)
        return Outcome(tpot, rate, batch, view, al)

    def step_like(self, whatifs: tuple[WhatIf, ...], kind: str, tokens: int, batch: int,
                  context_len: float | None = None) -> float:
        """GPU-visible seconds of one measured-like step (prefill of `tokens`, or decode of `batch` sequences)
        under the what-ifs' scenario changes and step adjustments (speculation does not apply to one step).
        The model's per-step CPU time (class `host`) is left out, as a trace's GPU span leaves it out."""
        sc = self.scenario_of(whatifs)
        if kind == "prefill":
            pred = self.model.prefill(sc, tokens, batch=batch)
        else:
            per_seq = max(1, tokens // max(1, batch))
            ctx = context_len if context_len is not None else sc.isl + sc.osl / 2.0
            pred = self.model.decode(sc, batch, ctx, per_seq)
        view = StepView.of(pred)
        for fn in (*self.base_adjusts, *(w.adjust for w in (*self.applied, *whatifs) if w.adjust is not None)):
            view = fn(sc, view)
        return view.step_time_s - view.class_time_s.get("host", 0.0)

    def objective_value(self, whatifs: tuple[WhatIf, ...]) -> Outcome:
        """TPOT objective: the outcome at `concurrency`. Throughput: the best concurrency whose TPOT stays
        within `tpot_limit_s` (default: the baseline TPOT at `concurrency`), up to the memory limit."""
        if self.objective == "tpot":
            return self.at(whatifs, self.concurrency)
        limit = self.tpot_limit_s or self.at((), self.concurrency).tpot_s
        max_c = self.max_concurrency(self.scenario_of(whatifs))
        best: Outcome | None = None
        for c in concurrency_grid(max(max_c, 1)):
            out = self.at(whatifs, c)
            if out.tpot_s <= limit * (1 + 1e-9) and (best is None or out.output_tok_s > best.output_tok_s):
                best = out
        return best if best is not None else self.at(whatifs, 1)

    def gain(self, base: Outcome, new: Outcome) -> float:
        """Ratio of the objective: baseline TPOT / new TPOT, or new throughput / baseline throughput."""
        if self.objective == "tpot":
            return base.tpot_s / new.tpot_s
        return new.output_tok_s / base.output_tok_s


def gain_bounds(gain: float, rel_uncertainty: float) -> tuple[float, float]:
    """Bounds on a gain when the model's time for the change is uncertain by ±rel_uncertainty.

    Baseline 1, new time n = 1/g, change Δ = |1 − n|; the error is r·min(Δ, n): a small change is uncertain in
    proportion to itself, a large one in proportion to the time that remains.  g_low = 1/(n + d), g_high = 1/(n − d).
    """
    new = 1.0 / gain
    delta = rel_uncertainty * min(abs(1.0 - new), new)
    return 1.0 / (new + delta), 1.0 / max(new - delta, 1e-12)
