"""The `speculative_decoding` track: drafter scenarios, best k, gain range and where speculation stops paying.

Does: pick the method (MTP when the checkpoint has MTP layers, else EAGLE-3) and acceptance (the user's, else the
bundled measured curve), price each k with the engine-style iteration of perfmodel.speculative (the drafter's own
architecture — an EAGLE-3 head for an MLA model is an MLA layer —, multi-token-query verification, the experts
B·(k+1) tokens touch, CUDA-graph padding, the draft loop's launches, sampling, rejection and host sync), keep the
k with the best objective, and find where the gain falls below 1. Its gain range comes from the model's
cross-validated error on the published pairs (planner.gain_range.PlanRange.track_gain).
Does not: model tree drafting or adaptive verification (both verify more tokens than they accept).
"""

from __future__ import annotations

from collections.abc import Callable

from servescope.errors import PlanError, ServescopeError
from servescope.perfmodel.speculative import SpecShape, spec_error
from servescope.perfmodel.step import verify_as_prefill
from servescope.planner.speculative import (
    Acceptance,
    SpecConfig,
    breakeven_concurrency,
    bundled_acceptance,
    concurrency_grid,
    user_acceptance,
)
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.whatif import SpecSetup, WhatIf
from servescope.specs.models import ModelSpec

KIND = "speculative_decoding"
MAX_BREAKEVEN_CONCURRENCY = 1024


def _method(ctx: Context) -> SpecConfig:
    if ctx.spec is not None:
        return ctx.spec
    return SpecConfig(method="mtp" if ctx.scenario.model.n_mtp_layers > 0 else "eagle3")


def _acceptance(cfg: SpecConfig, model: ModelSpec) -> Acceptance | None:
    if cfg.acceptance is not None:
        return user_acceptance(cfg.acceptance, cfg.acceptance_source)
    if cfg.method in ("draft", "ngram"):
        return None
    return bundled_acceptance(model.name, cfg.method)


def _setups(cfg: SpecConfig, acc: Acceptance, k: int) -> tuple[WhatIf, WhatIf, WhatIf]:
    shape = SpecShape(cfg.method, k)
    nominal, low, high = (WhatIf(KIND, spec=SpecSetup(shape, acc.al(k, which), cfg.method, cfg.draft_model))
                          for which in ("nominal", "low", "high"))
    return nominal, low, high


def speculative_track(ctx: Context) -> Proposal:
    cfg = _method(ctx)
    model = ctx.scenario.model
    validate = _validate(cfg)
    if cfg.method == "mtp" and model.n_mtp_layers == 0:
        return not_applicable(KIND, f"{model.name} has no MTP layers (num_nextn_predict_layers = 0); "
                              "use EAGLE-3 or a draft model", "config change", validate)
    acc = _acceptance(cfg, model)
    if acc is None:
        return not_applicable(KIND, f"no measured acceptance for {cfg.method} on {model.name}; pass "
                              "--acceptance P1,P2,... or --acceptance-rate A --spec-k K", "config change", validate)
    if cfg.k is not None and cfg.k > acc.max_k:
        raise PlanError(f"--spec-k {cfg.k} exceeds the {acc.max_k} positions of the acceptance curve ({acc.name})")
    try:
        k, whatifs = _best_k(ctx, cfg, acc)
    except ServescopeError as exc:
        return not_applicable(KIND, f"drafter cannot be priced: {exc}", "config change", validate)
    nominal = whatifs[0]
    ev = ctx.evaluator
    max_c = min(MAX_BREAKEVEN_CONCURRENCY, ev.max_concurrency(ctx.scenario))

    def gain_at(c: int) -> float:
        return ev.at((), c).tpot_s / ev.at((nominal,), c).tpot_s

    stop = breakeven_concurrency(gain_at, max_c)
    again = pays_again_at(gain_at, stop, max_c)
    pre = (
        _drafter_precondition(cfg, model),
        f"acceptance AL({k}) = {acc.al(k):.2f} from {acc.name} [{acc.source}]; measure yours",
        "memory for the drafter weights and its KV cache",
    ) + _verify_path_precondition(ctx)
    stops = (f"stops paying at concurrency ≈{stop:.0f}" if stop is not None
             else f"still pays at concurrency {max_c} (the memory limit)")
    again_stop = stops_again_at(gain_at, again, max_c)
    if again is not None:
        stops += (f", pays again from ≈{again:.0f} (once B·{k + 1} and B tokens both touch nearly every expert, "
                  "verifying the extra tokens costs little)")
    if again_stop is not None:
        stops += f", and stops again at ≈{again_stop:.0f}"
    return Proposal(
        KIND, True, None, "config change", pre, validate, whatif=nominal, bounds=(whatifs[1], whatifs[2]),
        note=f"{cfg.method} k={k}, AL {acc.al(k):.2f} ({acc.al(k, 'low'):.2f}–{acc.al(k, 'high'):.2f}); {stops}",
        details={"method": cfg.method, "k": k, "accepted_length": acc.al(k), "breakeven_concurrency": stop,
                 "pays_again_concurrency": again, "stops_again_concurrency": again_stop,
                 "acceptance_source": acc.source, "max_concurrency_checked": max_c, "range": _range_words()},
    )


def _range_words() -> str:
    e = spec_error()
    return (f"gain range from the model's cross-validated error on {e.rows} published with/without pairs "
            f"({e.sources} sources, leave one out): measured/predicted q10 {e.q10:.2f}, q90 {e.q90:.2f}")


def pays_again_at(gain_at: Callable[[int], float], stop: float | None, max_concurrency: int) -> float | None:
    """First grid concurrency above `stop` where the gain is back above 1 (MoE: the verified tokens stop adding
    experts once the plain batch already reads them all); None when it never comes back up to max_concurrency."""
    return _next_crossing(gain_at, stop, max_concurrency, above=True)


def stops_again_at(gain_at: Callable[[int], float], again: float | None, max_concurrency: int) -> float | None:
    """First grid concurrency above `again` where the gain falls below 1 once more (a verify path whose cost grows
    with the batch, e.g. an MLA prefill path: perfmodel/step.py); None when it keeps paying up to max_concurrency."""
    return _next_crossing(gain_at, again, max_concurrency, above=False)


def _next_crossing(gain_at: Callable[[int], float], after: float | None, max_concurrency: int,
                   above: bool) -> float | None:
    """First grid concurrency above `after` where the gain is above 1 (`above`) or below it; None if none."""
    if after is None:
        return None
    for c in concurrency_grid(max_concurrency):
        if c > after and (gain_at(c) > 1.0 if above else gain_at(c) < 1.0):
            return float(c)
    return None


def _best_k(ctx: Context, cfg: SpecConfig, acc: Acceptance) -> tuple[int, tuple[WhatIf, WhatIf, WhatIf]]:
    ev = ctx.evaluator
    candidates = [cfg.k] if cfg.k is not None else list(range(1, acc.max_k + 1))
    best: tuple[float, int, tuple[WhatIf, WhatIf, WhatIf]] | None = None
    for k in candidates:
        setups = _setups(cfg, acc, k)
        g = ev.gain(ctx.baseline, ev.objective_value((setups[0],)))
        if best is None or g > best[0] + 1e-12:
            best = (g, k, setups)
    assert best is not None
    return best[1], best[2]


def _verify_path_precondition(ctx: Context) -> tuple[str, ...]:
    """Where the engine verifies on its MLA prefill path (perfmodel.step.verify_as_prefill), what that costs and
    what avoids it."""
    sc = ctx.scenario
    if not verify_as_prefill(sc):
        return ()
    return (f"{sc.backend}'s MLA backend on {sc.gpu.compute_capability} (Triton MLA) verifies the k+1 tokens on its "
            "prefill path, re-expanding each sequence's cached context every step (vllm#51065): the gain falls with "
            "batch; an engine that verifies with its decode kernel (SGLang; a vLLM whose Triton MLA declares uniform "
            "multi-token decode, vllm#52218) avoids it",)


def _drafter_precondition(cfg: SpecConfig, model: ModelSpec) -> str:
    if cfg.method in ("eagle", "eagle3"):
        return f"a trained {cfg.method.upper()} draft head for {model.name}"
    if cfg.method == "ngram":
        return "output that repeats the prompt (n-gram lookup drafts from it)"
    if cfg.method == "mtp":
        return f"the checkpoint's MTP weights ({model.n_mtp_layers} layer(s)) loaded"
    return f"draft model {cfg.draft_model} sharing {model.name}'s tokenizer"


def _validate(cfg: SpecConfig) -> str:
    method = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "draft": "draft_model",
              "ngram": "ngram"}[cfg.method]
    model = f', "model": "{cfg.draft_model}"' if cfg.draft_model else ', "model": "<draft head>"'
    if cfg.method in ("mtp", "ngram"):
        model = ""
    k = cfg.k if cfg.k is not None else "K"
    return (
        f"vLLM --speculative-config '{{\"method\": \"{method}\"{model}, \"num_speculative_tokens\": {k}}}'; "
        "measure TPOT at the planned concurrency and the accepted length from /metrics "
        "(vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_drafts + 1); pin the cost side with "
        "synthetic acceptance (rejection_sample_method=synthetic, synthetic_acceptance_length)"
    )
