"""The `expert_parallel` track: the perfmodel's EP layouts against the current one, nothing priced here.

Does: `expert_parallel` — the layouts with experts over all n GPUs that the one layout enumerator
(planner.layouts, the sweep's) lists with attention TP no wider than today's: EP with TP attention (today's TP × DP),
and EP with attention data parallelism (TP t × DP n/t, t < TP), each checked to fit in memory; the gain of each is
the perfmodel's TPOT ratio at the planned batch — the same number `model` and `sweep` give for that layout, with
the busiest GPU's experts (perfmodel.ep_balance) and the dispatch/combine collectives priced there — and the verdict
explained in plain words from the numbers (what the layout adds and saves at this batch on this link).
`expert_imbalance`: perfmodel.ep_balance's busiest-GPU factor under uniform routing, kept under its old name.
Does not: price the all-to-all or the imbalance (perfmodel) or the all-reduce tracks (planner.tracks_comm, which
re-exports these names).
"""

from __future__ import annotations

from servescope.errors import ScenarioError
from servescope.perfmodel.ep_balance import uniform_imbalance
from servescope.perfmodel.scenario import Scenario
from servescope.planner.layouts import layouts
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.whatif import Change, StepView, WhatIf


def expert_parallel_track(ctx: Context) -> Proposal:
    kind, sc = "expert_parallel", ctx.scenario
    validate = ("vLLM --enable-expert-parallel (with --data-parallel-size N for attention-DP); compare TPOT at the "
                "planned concurrency and the all-to-all µs per call in a trace")
    if not sc.model.is_moe:
        return not_applicable(kind, f"{sc.model.name} is dense: no experts to distribute", "config change", validate)
    n = int(sc.tp) * int(sc.dp)
    if n == 1:
        return not_applicable(kind, "one GPU: nothing to distribute experts over", "config change", validate)
    if sc.ep == n:
        return not_applicable(kind, f"already expert-parallel (EP={sc.ep})", "config change", validate)
    options: list[tuple[float, str, WhatIf]] = []
    unfit: list[tuple[str, WhatIf, str]] = []
    for name, changes in _ep_layouts(sc, n):
        whatif = WhatIf(kind, scenario=Change.of(changes, check_fits=True), exclusive=("parallelism_change",))
        try:
            gain = ctx.evaluator.gain(ctx.baseline, ctx.evaluator.objective_value((whatif,)))
        except ScenarioError as exc:
            unfit.append((name, WhatIf(kind, scenario=Change.of(changes)), str(exc)))
            continue
        options.append((gain, name, whatif))
    explain = _explain_ep(ctx, options, unfit)
    if not options:
        return not_applicable(kind, f"no expert-parallel layout of {n} GPUs fits {sc.model.name}: {explain}",
                              "config change", validate)
    gain, name, whatif = max(options, key=lambda o: o[0])
    why = None if gain > 1.0 else f"does not pay at batch {ctx.concurrency} over {_link(ctx)}: {explain}"
    pre = (f"{sc.model.n_routed_experts} experts divisible by EP={n}",
           "experts placed as the engine's default (EPLB off): the busiest GPU's experts priced, "
           "perfmodel.ep_balance")
    return Proposal(kind, True, why, "config change", pre, validate, whatif=whatif, note=name,
                    details={"layout": name, "options": {o[1]: o[0] for o in options},
                             "explanation": explain, "unfit": [u[0] for u in unfit]})


def _ep_layouts(sc: Scenario, n: int) -> list[tuple[str, dict[str, int]]]:
    """The enumerator's layouts of n GPUs with EP over all of them (planner.layouts, as the sweep prices them) and
    attention TP no wider than today's: today's TP × DP ("EP with TP attention"), then attention TP t × DP n/t for
    smaller t whose heads divide, widest first."""
    out = []
    for lay in sorted((x for x in layouts(n, moe=True) if x.ep == n and x.tp <= sc.tp), key=lambda x: -x.tp):
        if lay.tp == sc.tp and lay.dp == sc.dp:
            out.append(("EP with TP attention", {"ep": n}))
        elif lay.tp < sc.tp and sc.model.n_heads % lay.tp == 0:
            out.append((f"EP with attention TP{lay.tp}×DP{lay.dp}", {"tp": lay.tp, "dp": lay.dp, "ep": n}))
    return out


def _link(ctx: Context) -> str:
    return "PCIe" if ctx.pcie else "NVLink"


def _explain_ep(ctx: Context, options: list[tuple[float, str, WhatIf]],
                unfit: list[tuple[str, WhatIf, str]]) -> str:
    """Plain words from the numbers: what each EP layout adds and saves at this batch on this link."""
    base = ctx.baseline.step
    parts = []
    a2a_layouts = []
    for gain, name, whatif in sorted(options, key=lambda o: -o[0]):
        new = ctx.evaluator.at((whatif,), ctx.concurrency).step
        if _dispatch(new) is None:
            moe_old, moe_new = base.class_time_s.get("moe", 0.0), new.class_time_s.get("moe", 0.0)
            parts.append(f"{name} keeps every all-reduce and holds whole experts per GPU, so the busiest GPU's "
                         f"experts take {_ms(moe_new)} instead of {_ms(moe_old)} (load imbalance; gain {gain:.2f})")
        else:
            a2a_layouts.append((name, new, f"gain {gain:.2f}"))
    for name, whatif, _reason in unfit:
        try:
            new = ctx.evaluator.at((whatif,), ctx.concurrency).step
        except ScenarioError:
            continue
        if _dispatch(new) is not None:
            a2a_layouts.append((name, new, "does not fit in memory: attention replicated per DP rank"))
    if a2a_layouts:
        name, new, verdict = a2a_layouts[0]
        parts.append(_a2a_sentence(ctx, name, new, verdict))
    return "; ".join(parts)


def _dispatch(step: StepView) -> tuple[str, float, float, float] | None:
    """(words, calls, seconds, bytes per call) of the MoE dispatch + combine collectives of a step, if any: an
    all-to-all, or the all-gather + reduce-scatter that vLLM's and SGLang's default all-to-all backends run
    (perfmodel/step.py `dispatch_mode`)."""
    a2a = step.collectives.get("all_to_all")
    if a2a is not None:
        return "all-to-all calls", a2a.calls_per_step, a2a.time_s, a2a.bytes_per_call
    ag, rs = step.collectives.get("all_gather"), step.collectives.get("reduce_scatter")
    if ag is None or rs is None:
        return None
    return ("all-gather + reduce-scatter calls (the engine's default all-to-all backend",
            ag.calls_per_step + rs.calls_per_step, ag.time_s + rs.time_s, ag.bytes_per_call)


def _a2a_sentence(ctx: Context, name: str, new: StepView, verdict: str) -> str:
    base = ctx.baseline.step
    ar = base.collectives.get("all_reduce")
    found = _dispatch(new)
    assert found is not None
    words, calls, time_s, nbytes = found
    per_call_us = time_s / max(1.0, calls) * 1e6
    # below ~128 KB a PCIe/NVLink collective costs about its latency floor (hardware-and-models.md §2a)
    bound = f": latency-bound at batch {ctx.concurrency}" if nbytes < 128e3 else ""
    words = words + ("," if words.endswith("backend") else " (")
    text = (f"{name} swaps the all-reduces ({_ms(ar.time_s if ar else 0.0)}) for {calls:.0f} "
            f"{_link(ctx)} {words} dispatch + combine, {per_call_us:.0f} µs each on "
            f"{nbytes / 1e3:.0f} KB messages{bound})")
    w_old, w_new = base.terms_s.get("weights", 0.0), new.terms_s.get("weights", 0.0)
    if w_new > w_old * 1.05:
        text += (f", while each request's attention runs on fewer GPUs that read its weights "
                 f"({_ms(w_old)} → {_ms(w_new)} of weight reads)")
    return f"{text} ({verdict})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def expert_imbalance(n_experts: int, top_k: int, ep: int, tokens: int) -> float:
    """Busiest GPU's distinct routed experts over the mean GPU's for T tokens of top-k under uniform routing, whole
    experts on `ep` GPUs: perfmodel.ep_balance.uniform_imbalance (the formula, units and assumptions there)."""
    return uniform_imbalance(n_experts, top_k, ep, tokens)
