"""The speculative axis of a grid sweep (issue 30.4): a setting per structural configuration (off, or a method with
k draft tokens), priced as `servescope plan` prices speculation (planner.whatif.Evaluator.at), on the serving closed
form of the same point.

A setting "METHOD:K" (e.g. `mtp:2`, `eagle3:3`) takes the accepted length AL(k) = 1 + Σ_{i≤k} P_i of the bundled
measured acceptance curve for the model and method (planner.speculative.bundled_acceptance, nominal; "eagle" reads
the EAGLE-3 curve, as the plan does); the drafter is perfmodel.speculative.draft_scenario's (MTP: the checkpoint's
own layers; EAGLE/EAGLE-3: the head derived from the target's config). A model without MTP layers or without a
curve for the method has no such configuration (a skipped line, like a layout that does not fit).
For one point, with the serving closed form's batch b = min(c, slots) at the point's lengths (perfmodel.serving):

  iteration  = perfmodel.speculative.iteration(sc, drafter, b, SpecShape(method, k), step)        (seconds)
               step = the decode step at the scenario's decode context (perfmodel.step), as the plan's Evaluator
  TPOT       = iteration / AL + max(0, TPOT_off − step_off)      (the plan's: the other requests' prefills landing
                                                                  in a decode step are the serving closed form's)
  TTFT       = perfmodel.serving.ttft_s with the running step = one iteration and TPOT the speculative one
  output tok/s = perfmodel.serving.output_tok_s(c, slots, osl, TTFT, TPOT)
Assumptions (as the plan's): the KV slots are the target's (the drafter's weights and KV are a precondition, not
priced), and the drafter's own prefill of the prompt is left out of TTFT. The batch is the serving closed form's
(slots capped at max_num_seqs · dp, as with the setting off); the plan's Evaluator caps at the KV slots alone, so the
two agree wherever c ≤ max_num_seqs · dp (tests/planner/test_sweep_spec.py checks TPOT to 1e-12 there).
The exact tier evaluates this at its points (one `iteration` call per distinct batch, the steps vectorised over the
group's batches: the same numbers decode_step gives); the screen (planner.screen) interpolates the steps' parts.
What it does not: simulate a speculative point (the simulator has no speculative decoding), tree drafts, or a
user-given acceptance (the plan's --acceptance; a grid takes the bundled curves).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.errors import ScenarioError

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario
    from servescope.perfmodel.serving import ServingParts
    from servescope.perfmodel.speculative import SpecShape
    from servescope.perfmodel.step_types import StepParts
    from servescope.specs.engines import Speculative

OFF = "off"


@dataclass(frozen=True)
class SpecSetting:
    """A value of the speculative axis: "off", or `method` with `k` draft tokens per iteration (a chain)."""

    method: str = OFF
    k: int = 0

    @property
    def on(self) -> bool:
        return self.method != OFF

    def label(self) -> str:
        return OFF if not self.on else f"{self.method}:{self.k}"


def parse_specs(text: str | None) -> tuple[SpecSetting, ...]:
    """`off,mtp:1,eagle3:3` → settings (None or empty: off only); ScenarioError naming a bad value."""
    from servescope.perfmodel.speculative import METHODS

    out = []
    for item in (text or OFF).split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item == OFF:
            out.append(SpecSetting())
            continue
        method, _, k = item.partition(":")
        method = method.replace("-", "")
        if method not in METHODS or not k.strip().isdigit() or int(k) < 1:
            raise ScenarioError(f"sweep grid: --spec value {item!r}: expected off or METHOD:K with K ≥ 1 "
                                f"(methods: {', '.join(METHODS)})")
        out.append(SpecSetting(method, int(k)))
    if not out:
        raise ScenarioError("sweep grid: --spec is empty")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class SpecPricing:
    """What one configuration's speculation is priced with: the shape, the accepted length and where it comes
    from, and the engine's way of running an iteration."""

    setting: SpecSetting
    shape: SpecShape
    al: float
    source: str
    eng: Speculative
    draft: Scenario | None  # the drafter of the configuration's scenario (perfmodel.speculative.draft_scenario)

    def drafter(self, sc: Scenario) -> Scenario | None:
        """The drafter at `sc`'s lengths (`sc`: the configuration's scenario at some ISL and OSL): draft_scenario's,
        its model built once (the step model's caches are keyed by the model object)."""
        from dataclasses import replace

        return None if self.draft is None else replace(self.draft, isl=sc.isl, osl=sc.osl)


def pricing(sc: Scenario, setting: SpecSetting) -> SpecPricing | None:
    """None for "off"; else the setting's pricing on `sc`, or ScenarioError (one line) when the model has no such
    drafter or no bundled acceptance for it, or k exceeds the curve."""
    from servescope.perfmodel.speculative import SpecShape, draft_scenario
    from servescope.planner.speculative import bundled_acceptance

    if not setting.on:
        return None
    if setting.method == "mtp" and sc.model.n_mtp_layers == 0:
        raise ScenarioError(f"{sc.model.name} has no MTP layers (num_nextn_predict_layers = 0)")
    acc = bundled_acceptance(sc.model.name, setting.method)
    if acc is None:
        raise ScenarioError(f"no bundled acceptance for {setting.method} on {sc.model.name}")
    if setting.k > acc.max_k:
        raise ScenarioError(f"k={setting.k} exceeds the {acc.max_k} positions of {acc.name}")
    shape = SpecShape(setting.method, setting.k)
    return SpecPricing(setting, shape, acc.al(setting.k), f"{acc.name} [{acc.source}]", sc.engine.speculative,
                       draft_scenario(sc, shape.method))  # a drafter the model cannot build: a skipped configuration


def fixed_affine(sc: Scenario, draft: Scenario | None, pr: SpecPricing) -> tuple[float, float]:
    """(a, b) with the iteration's fixed seconds = a + b · batch: perfmodel.speculative.iteration's launches, host
    syncs (constant), sampling and host bookkeeping (∝ batch), read off at batch 1 and 2 with zero-time steps."""
    from servescope.perfmodel.speculative import iteration

    def zero(_sc: Scenario, _b: int, _t: int) -> tuple[float, float]:
        return 0.0, 0.0

    f1, f2 = (iteration(sc, draft, b, pr.shape, zero).fixed_s for b in (1, 2))
    return f1 - (f2 - f1), f2 - f1


def spec_serving(p: ServingParts, a: dict[str, Any], iteration_s: np.ndarray, al: float,
                 eff: Any) -> dict[str, np.ndarray]:
    """TPOT, TTFT (s) and output tok/s with speculation (module docstring), from the serving closed form's parts
    `p` and their combination `a` (perfmodel.serving.combine_serving) and each point's iteration seconds."""
    from servescope.perfmodel.combine import combine_step
    from servescope.perfmodel.serving import (
        TtftEfficiency,
        TtftQueue,
        TtftTimes,
        output_tok_s,
        ttft_s,
    )

    interference = np.where(a["batch"] > 1, np.maximum(0.0, a["tpot_s"] - a["step"]), 0.0)
    tpot = iteration_s / al + interference
    wave = combine_step(p.wave, eff)["step"]
    ttft = ttft_s(TtftTimes(a["pf_step"], a["pf_overhead"], wave, iteration_s, tpot), TtftQueue.of(p),
                  TtftEfficiency.of(eff))
    return {"tpot_s": tpot, "ttft_s": ttft, "output_tok_s": output_tok_s(p.concurrency, p.cap, p.osl, ttft, tpot)}


def exact_spec(sc: Scenario, pr: SpecPricing, concurrency: Sequence[int]) -> dict[str, np.ndarray]:
    """The speculative closed form (module docstring) at `sc`'s lengths and some concurrencies: one
    perfmodel.speculative.iteration per distinct batch, its steps step_arrays over the batches at once."""
    from servescope.perfmodel.serving import combine_serving, serving_parts
    from servescope.perfmodel.speculative import iteration
    from servescope.perfmodel.step import step_arrays

    p = serving_parts(sc, concurrency)
    a = combine_serving(p, sc.efficiency)
    batches = np.unique(np.asarray(a["batch"], dtype=float))
    draft = pr.drafter(sc)
    cache: dict[tuple[int, int], tuple[Scenario, np.ndarray, np.ndarray]] = {}

    def step(scen: Scenario, b: int, t: int) -> tuple[float, float]:  # Evaluator.step: decode_step at decode_context
        hit = cache.get((id(scen), t))
        if hit is None or hit[0] is not scen:
            arr = step_arrays(scen, batches, scen.decode_context, t)
            hit = (scen, np.broadcast_to(arr["step"], batches.shape), np.broadcast_to(arr["cpu"], batches.shape))
            cache[(id(scen), t)] = hit
        j = int(np.searchsorted(batches, b))
        return float(hit[1][j]), float(hit[2][j])

    it = {float(b): iteration(sc, draft, int(b), pr.shape, step).total_s for b in batches}
    return spec_serving(p, a, np.array([it[float(b)] for b in a["batch"]]), pr.al, sc.efficiency)


def batch_edges(sc: Scenario, pr: SpecPricing | None, top: float) -> list[float]:
    """Batches where a speculative step's graph padding or eagerness changes, up to `top`: for each CUDA-graph
    capture size s and tokens per sequence t of the iteration (k + 1, the draft's width), ⌊s·dp/t⌋ and one more;
    the engine's speculative graph limit and one more."""
    if pr is None:
        return []
    sizes = sc.engine.graphs.capture_sizes if sc.cuda_graphs else ()
    tokens = {pr.shape.k + 1, pr.shape.width}
    edges = [float(e) for s in sizes for t in tokens for e in (s * sc.dp // t, s * sc.dp // t + 1)]
    if pr.eng.graph_max_batch:
        edges += [float(pr.eng.graph_max_batch), float(pr.eng.graph_max_batch + 1)]
    return [e for e in edges if 1 <= e <= top]


def iteration_parts(sc: Scenario, pr: SpecPricing) -> list[tuple[str, Scenario, int, float]]:
    """The steps of one iteration as (role, scenario, tokens per sequence, multiplicity) for `sc` (its lengths):
    verify (k+1 tokens), the draft's first forward (k+1) and its later ones (width, depth − 1 times); each role
    with both a graphed and an eager scenario where the engine's speculative graph limit applies (roles ending in
    ":eager", used above the limit). perfmodel.speculative.iteration's `_graphs`/`first_forward_eager` rule."""
    from dataclasses import replace

    def _eager(s: Scenario) -> Scenario:
        return replace(s, cuda_graphs=False)

    eng, shape, draft = pr.eng, pr.shape, pr.drafter(sc)
    out = [("verify", sc, shape.k + 1, 1.0)]
    if draft is not None and shape.draft_forwards > 0:
        first = _eager(draft) if eng.first_forward_eager else draft
        out.append(("first", first, min(shape.k, shape.depth or shape.k) + 1, 1.0))
        if shape.draft_forwards > 1:
            out.append(("rest", draft, shape.width, float(shape.draft_forwards - 1)))
    if eng.graph_max_batch:
        out += [(role + ":eager", _eager(s), t, m) for role, s, t, m in out]
    return out


def iteration_from_parts(parts: dict[str, StepParts], roles: list[tuple[str, float]], batch: np.ndarray,
                         pr: SpecPricing, fixed: tuple[float, float], eff: Any) -> np.ndarray:
    """Each point's iteration seconds from its interpolated step parts (perfmodel.speculative.iteration: verify's
    step, the draft's steps less their per-step CPU time, the fixed part; eager roles above the engine's limit)."""
    from servescope.perfmodel.combine import combine_step

    eager = batch > pr.eng.graph_max_batch if pr.eng.graph_max_batch else np.zeros(batch.shape, dtype=bool)
    total = fixed[0] + fixed[1] * batch
    for role, mult in roles:
        if role.endswith(":eager"):
            continue
        a = combine_step(parts[role], eff)
        g = a["step"] if role == "verify" else a["step"] - a["cpu"]
        if eng_e := parts.get(role + ":eager"):
            b = combine_step(eng_e, eff)
            g = np.where(eager, b["step"] if role == "verify" else b["step"] - b["cpu"], g)
        total = total + mult * np.broadcast_to(g, batch.shape)
    return np.asarray(total)
