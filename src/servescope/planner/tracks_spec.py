"""The `speculative_decoding` track: drafter scenarios, best k, gain range and where speculation stops paying.

Does: build the drafter as a scenario the performance model can price —
  EAGLE / EAGLE-3: one Llama-style decoder layer at the target's hidden size (GQA, the target's dense
    intermediate size, target vocabulary for the LM head — conservative: many heads use a 32k draft vocab —
    plus the 3h→h fusion layer), BF16, same TP as the target (vLLM runs the drafter on the target's ranks);
  MTP: one of the target's own layers (its MTP module) with the shared LM head, target quantization;
  draft model: the named model at the target's TP, in its own checkpoint quantization —
then prices verification as decode_step(tokens_per_seq = k+1) and picks the k with the best objective.
Does not: model tree drafting or adaptive verification (both verify more tokens than they accept).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servescope.errors import PlanError, ServescopeError
from servescope.planner.speculative import (
    Acceptance,
    SpecConfig,
    breakeven_concurrency,
    bundled_acceptance,
    user_acceptance,
)
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.whatif import SpecSetup, WhatIf
from servescope.specs import quant as q
from servescope.specs.models import ModelSpec, load_model, parse_config

KIND = "speculative_decoding"
MAX_BREAKEVEN_CONCURRENCY = 1024


def eagle_drafter(target: ModelSpec) -> ModelSpec:
    """One Llama-style layer at the target's width (see module docstring for the assumptions)."""
    h, nh = target.hidden_size, target.n_heads
    nkv = target.n_kv_heads if target.attention_kind == "gqa" else min(8, nh)
    inter = target.intermediate_size or 4 * h
    cfg = {
        "model_type": "llama", "num_hidden_layers": 1, "hidden_size": h, "vocab_size": target.vocab_size,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": h // nh, "intermediate_size": inter,
    }
    spec = parse_config(cfg, f"{target.name}-eagle3-head", "servescope:eagle3 drafter (planner assumption)")
    fc = 3.0 * h * h  # EAGLE-3 fuses three target hidden states into one (3h -> h)
    return replace(spec, params=replace(spec.params, dense_mlp=spec.params.dense_mlp + fc))


def mtp_drafter(target: ModelSpec) -> ModelSpec:
    """The target's MTP module: one of its last layers, LM head shared."""
    p = target.params
    n_attn = max(1, sum(1 for a in target.layer_attention if a in ("full", "sliding")))
    mlp = target.layer_mlp[-1]
    n_mlp = max(1, sum(1 for m in target.layer_mlp if m == mlp))
    params = replace(
        p,
        attention=p.attention / n_attn,
        attention_replicated=p.attention_replicated / n_attn,
        dense_mlp=p.dense_mlp / n_mlp if mlp == "dense" else 0.0,
        routed_experts=p.routed_experts / n_mlp if mlp == "moe" else 0.0,
        shared_experts=p.shared_experts / n_mlp if mlp == "moe" else 0.0,
        other=2.0 * target.hidden_size * target.hidden_size,  # the 2h -> h projection of the MTP module
        mtp=0.0,
    )
    return replace(
        target, name=f"{target.name}-mtp", n_layers=1, layer_attention=("full",), layer_mlp=(mlp,),
        n_mtp_layers=0, params=params, v4_compress=target.v4_compress[-1:] if target.v4_compress else (),
    )


def _bf16_quant(kv: Any) -> Any:
    b = q.SCHEMES["bf16"]
    return q.QuantConfig(b, b, b, b, b, kv)


def drafter(method: str, draft_model: str | None) -> Any:
    """A function from the target scenario to the drafter scenario."""

    def build(sc: Any) -> Any:
        # dense drafters take no expert parallelism (ep=1); they run on the target's TP ranks
        if method in ("eagle", "eagle3"):
            return replace(sc, model=eagle_drafter(sc.model), quant=_bf16_quant(sc.quant.kv), ep=1)
        if method == "mtp":
            return replace(sc, model=mtp_drafter(sc.model))
        spec = load_model(str(draft_model))
        return replace(sc, model=spec, quant=spec.native_quant or _bf16_quant(sc.quant.kv),
                       ep=sc.ep if spec.is_moe else 1)

    return build


def _method(ctx: Context) -> SpecConfig:
    if ctx.spec is not None:
        return ctx.spec
    return SpecConfig(method="mtp" if ctx.scenario.model.n_mtp_layers > 0 else "eagle3")


def _acceptance(cfg: SpecConfig, model: ModelSpec) -> Acceptance | None:
    if cfg.acceptance is not None:
        return user_acceptance(cfg.acceptance)
    if cfg.method == "draft":
        return None
    return bundled_acceptance(model.name, cfg.method)


def _setups(cfg: SpecConfig, acc: Acceptance, k: int) -> tuple[WhatIf, WhatIf, WhatIf]:
    build = drafter(cfg.method, cfg.draft_model)
    return tuple(  # type: ignore[return-value]
        WhatIf(KIND, spec=SpecSetup(k, acc.al(k, which), build)) for which in ("nominal", "low", "high")
    )


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
    pre = (
        _drafter_precondition(cfg, model),
        f"acceptance AL({k}) = {acc.al(k):.2f} from {acc.name} [{acc.source}]; measure yours",
        "memory for the drafter weights and its KV cache",
    )
    stops = (f"stops paying at concurrency ≈{stop:.0f}" if stop is not None
             else f"still pays at concurrency {max_c} (the memory limit)")
    return Proposal(
        KIND, True, None, "config change", pre, validate, whatif=nominal, bounds=(whatifs[1], whatifs[2]),
        note=f"{cfg.method} k={k}, AL {acc.al(k):.2f} ({acc.al(k, 'low'):.2f}–{acc.al(k, 'high'):.2f}); {stops}",
        details={"method": cfg.method, "k": k, "accepted_length": acc.al(k), "breakeven_concurrency": stop,
                 "acceptance_source": acc.source, "max_concurrency_checked": max_c},
    )


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


def _drafter_precondition(cfg: SpecConfig, model: ModelSpec) -> str:
    if cfg.method in ("eagle", "eagle3"):
        return f"a trained {cfg.method.upper()} draft head for {model.name}"
    if cfg.method == "mtp":
        return f"the checkpoint's MTP weights ({model.n_mtp_layers} layer(s)) loaded"
    return f"draft model {cfg.draft_model} sharing {model.name}'s tokenizer"


def _validate(cfg: SpecConfig) -> str:
    method = {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "draft": "draft_model"}[cfg.method]
    model = f', "model": "{cfg.draft_model}"' if cfg.draft_model else ', "model": "<draft head>"'
    if cfg.method == "mtp":
        model = ""
    k = cfg.k if cfg.k is not None else "K"
    return (
        f"vLLM --speculative-config '{{\"method\": \"{method}\"{model}, \"num_speculative_tokens\": {k}}}'; "
        "measure TPOT at the planned concurrency and the accepted length from /metrics "
        "(vllm:spec_decode_num_accepted_tokens / vllm:spec_decode_num_drafts + 1); pin the cost side with "
        "synthetic acceptance (rejection_sample_method=synthetic, synthetic_acceptance_length)"
    )
