"""Speculative decoding as engines run it: the drafter's architecture and the cost of one speculative iteration.

Does: build the drafter as a scenario the step model can price, and price one iteration as a given engine
version runs it (the engine record's `speculative` section, specs/data/engines/<engine>.toml: vLLM's EagleProposer
loop, also used for MTP; SGLang 0.5.9 and 0.4):

    iteration = verify + draft + fixed                                                   (seconds)
    verify    = target step over B sequences × (k+1) query tokens (multi-token-query attention: each sequence's
                KV is read once, attention FLOPs × (k+1); MoE: distinct experts touched by B·(k+1) tokens, top-k of
                E — both inside perfmodel.step); CUDA-graph padding of the B·(k+1) tokens to the next captured
                size is perfmodel.step's (perfmodel.graphs); an engine whose speculative graphs stop at
                `graph_max_batch` sequences (SGLang 0.4: 32, unpadded) runs verify and draft eagerly above it
    draft     = drafter forward over the d+1 verified positions per sequence (fills the drafter's KV; d = depth,
                k for a chain; eager where `first_forward_eager`) + (d−1) forwards of w tokens per sequence
                (w = 1 for a chain, the tree's width otherwise); none pays the engine's per-step CPU time, which
                an iteration pays once (in `verify`)
    fixed     = eager kernels × launch_overhead_s   (the engine's eager_ops_per_iteration + eager_ops_per_draft_step
                                                     per drafter forward after the first, unless the loop is graphed)
              + vocabulary sampling bytes / (HBM BW · ELEMENTWISE_BW_FRACTION)
                  (argmax over B·w·V_draft fp32 logits per drafter forward; rejection sampling reads/writes
                   SAMPLER_PASSES × B·k·V·4 B more than the plain sampler's B·V)
              + host_syncs × HOST_SYNC_S   (the engine's blocking .item()/.tolist() per iteration)
              + HostCosts.per_seq_s × B + HostCosts.per_forward_s × drafter forwards   (fitted: data/spec_host.toml)
    gain      = t_base(B) · AL / iteration          (AL = accepted length, bonus token included)

Drafters: EAGLE / EAGLE-3 head = its own config.json when given (plus the 3h→h fusion GEMM), else one layer with
the target's attention kind (an MLA target gets an MLA layer, a GQA target a GQA layer) and a dense MLP at the
target's dense intermediate size; EAGLE-3 adds the 3h→h fusion GEMM, feeds its q/k/v (q_a/kv_a) 2h and has its
own LM head over `draft_vocab` (default the target vocabulary: conservative); EAGLE-1 adds 2h→h and shares the
target's LM head; BF16, on the target's TP ranks, no expert parallelism. MTP = one of the target's own layers plus
the 2h→h projection, target quantization; draft model = the named checkpoint; n-gram = no drafter forward.
Does not: acceptance (the caller gives AL), adaptive verification, overlap scheduling (SGLang spec v2), or tree
attention beyond "verify k tokens". Every constant below names its source or says it is an assumption.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from servescope.errors import BadConfig, ScenarioError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import decode_step
from servescope.specs import quant as q
from servescope.specs import tables
from servescope.specs.engines import ENGINES, Speculative, engine
from servescope.specs.models import ModelSpec, load_model

METHODS = ("eagle", "eagle3", "mtp", "draft", "ngram")

# One extra blocking device→host copy costs the median synchronous D2H copy (hipMemcpyWithStream) measured in
# /work/shared/traces/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz: 19.9 µs
# over 5 calls (bench/bench_speculative.py recomputes it). How many an iteration pays: specs.engines.
HOST_SYNC_S = 19.9e-6
# Softmax + argmax + rejection compare: bytes of fp32 logits read/written per vocabulary entry (assumption).
SAMPLER_PASSES = 3
FP32_BYTES = 4.0
# Elementwise kernels reach this share of peak HBM bandwidth (assumption; STREAM-like kernels on H100 reach
# ~0.8–0.9 of peak, smaller sampling tensors less).
ELEMENTWISE_BW_FRACTION = 0.7


def spec_engine(name: str) -> Speculative:
    """How an engine runs a speculative iteration: `sglang` — its newest release's; `sglang-0.4` — the release
    entry at or below 0.4 (specs.engines, the `speculative` section). BadConfig for an engine with no file or a
    release older than every entry."""
    backend, _, version = name.partition("-")
    if backend not in ENGINES:
        raise BadConfig(f"specs/data/engines/: no engine {backend!r} (speculative engine {name!r}); known: "
                        f"{', '.join(ENGINES)}")
    eng = engine(backend, version)
    if eng.note:
        raise BadConfig(f"speculative engine {name!r}: {eng.note}")
    return eng.speculative


@dataclass(frozen=True)
class SpecShape:
    """What one iteration drafts and verifies. Chain: k drafts, width 1, depth k. Tree: `k` verified draft
    tokens per sequence, `depth` drafter forwards of `width` tokens each."""

    method: str
    k: int
    depth: int = 0  # drafter forwards; 0 = k (chain)
    width: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ScenarioError(f"unknown speculative method {self.method!r}; known: {', '.join(METHODS)}")
        if self.k < 1 or self.width < 1 or self.depth < 0:
            raise ScenarioError(f"speculation needs k >= 1 and width >= 1 (k={self.k}, width={self.width})")

    @property
    def draft_forwards(self) -> int:
        return 0 if self.method == "ngram" else (self.depth or self.k)


@dataclass(frozen=True)
class SpecIteration:
    """One speculative iteration, seconds. `fixed_s` = launches + sampling + sync + host bookkeeping."""

    verify_s: float
    draft_s: float
    launches_s: float
    sampling_s: float
    sync_s: float
    host_s: float = 0.0

    @property
    def fixed_s(self) -> float:
        return self.launches_s + self.sampling_s + self.sync_s + self.host_s

    @property
    def total_s(self) -> float:
        return self.verify_s + self.draft_s + self.fixed_s

    def terms_s(self) -> dict[str, float]:
        return {"verify": self.verify_s, "draft": self.draft_s, "launches": self.launches_s,
                "sampling": self.sampling_s, "host_sync": self.sync_s, "host": self.host_s}


# ---------------------------------------------------------------------------------------------------- drafters
def _bf16(kv: q.QuantScheme) -> q.QuantConfig:
    b = q.SCHEMES["bf16"]
    return q.QuantConfig(b, b, b, b, b, kv)


def _input_projection_params(target: ModelSpec) -> tuple[float, float]:
    """(all, replicated) parameters of one layer's input-side attention projections (GQA q/k/v; MLA q_a or q,
    and kv_a): an EAGLE-3 layer feeds them [embedding, hidden] = 2h, so it holds them twice."""
    h = float(target.hidden_size)
    if target.attention_kind == "gqa":
        return h * (target.n_heads + 2 * target.n_kv_heads) * target.head_dim, 0.0
    rope = target.qk_rope_head_dim
    kv_a = h * (target.kv_lora_rank + rope)
    q_in = h * (target.q_lora_rank or target.n_heads * (target.qk_nope_head_dim + rope))
    return kv_a + q_in, kv_a + (q_in if target.q_lora_rank else 0.0)


def eagle_head(target: ModelSpec, method: str = "eagle3", draft_vocab: int | None = None) -> ModelSpec:
    """An EAGLE head derived from the target's config: one decoder layer with the target's attention kind (an
    MLA target gets an MLA layer) and a dense MLP at the target's dense width, plus the fusion GEMM
    (EAGLE-3: 3h→h, its q/k/v or q_a/kv_a fed 2h; EAGLE-1: 2h→h). LM head: EAGLE-3 its own over `draft_vocab`
    (default the target vocabulary, conservative); EAGLE-1 shares the target's (vLLM EagleProposer.load_model)."""
    p, h = target.params, target.hidden_size
    n_attn = max(1, sum(1 for a in target.layer_attention if a in ("full", "sliding")))
    inter = target.intermediate_size or 4 * h
    eagle3 = method == "eagle3"
    extra, extra_rep = _input_projection_params(target) if eagle3 else (0.0, 0.0)
    vocab = (draft_vocab or target.vocab_size) if eagle3 else target.vocab_size
    params = replace(
        p, attention=p.attention / n_attn + extra, attention_replicated=p.attention_replicated / n_attn + extra_rep,
        dense_mlp=3.0 * h * inter + (3.0 if eagle3 else 2.0) * h * h, routed_experts=0.0, shared_experts=0.0,
        other=0.0, mtp=0.0, lm_head=float(h) * vocab,
    )
    return replace(
        target, name=f"{target.name}-{method}-head", n_layers=1, layer_attention=("full",), layer_mlp=("dense",),
        n_routed_experts=0, top_k=0, shared_intermediate_size=0, n_mtp_layers=0, params=params, vocab_size=vocab,
        v4_compress=target.v4_compress[-1:] if target.v4_compress else (), linear_state_elems=0,
    )


def mtp_head(target: ModelSpec) -> ModelSpec:
    """The target's MTP module: one of its last layers plus the 2h→h projection, LM head shared."""
    p = target.params
    n_attn = max(1, sum(1 for a in target.layer_attention if a in ("full", "sliding")))
    mlp = target.layer_mlp[-1]
    n_mlp = max(1, sum(1 for m in target.layer_mlp if m == mlp))
    params = replace(
        p, attention=p.attention / n_attn, attention_replicated=p.attention_replicated / n_attn,
        dense_mlp=p.dense_mlp / n_mlp if mlp == "dense" else 0.0,
        routed_experts=p.routed_experts / n_mlp if mlp == "moe" else 0.0,
        shared_experts=p.shared_experts / n_mlp if mlp == "moe" else 0.0,
        other=2.0 * target.hidden_size * target.hidden_size, mtp=0.0,
    )
    return replace(
        target, name=f"{target.name}-mtp", n_layers=1, layer_attention=("full",), layer_mlp=(mlp,),
        n_mtp_layers=0, params=params, v4_compress=target.v4_compress[-1:] if target.v4_compress else (),
    )


def head_from_config(head: ModelSpec, target: ModelSpec) -> ModelSpec:
    """An EAGLE head given by its own config.json (e.g. a LlamaForCausalLMEagle3 checkpoint): its layers as the
    config says, plus the 3·h_target→h fusion GEMM that config files leave out of their layer shapes."""
    fc = 3.0 * target.hidden_size * head.hidden_size
    return replace(head, name=f"{head.name} (head of {target.name})",
                   params=replace(head.params, dense_mlp=head.params.dense_mlp + fc))


def draft_scenario(sc: Scenario, method: str, draft_model: str | None = None,
                   draft_vocab: int | None = None) -> Scenario | None:
    """The drafter's scenario on the target's GPUs; None for n-gram (no drafter forward). For EAGLE a
    `draft_model` is the head's own config (else the head is derived from the target's config, with an EAGLE-3
    LM head over `draft_vocab` tokens when given)."""
    if method in ("eagle", "eagle3"):
        model = (head_from_config(load_model(draft_model), sc.model) if draft_model
                 else eagle_head(sc.model, method, draft_vocab))
        return replace(sc, model=model, quant=_bf16(sc.quant.kv), ep=1)
    if method == "mtp":
        if sc.model.n_mtp_layers == 0:
            raise ScenarioError(f"{sc.model.name} has no MTP layers (num_nextn_predict_layers = 0)")
        return replace(sc, model=mtp_head(sc.model))
    if method == "draft":
        if not draft_model:
            raise ScenarioError("speculative method 'draft' needs a draft model")
        spec = load_model(draft_model)
        return replace(sc, model=spec, quant=spec.native_quant or _bf16(sc.quant.kv),
                       ep=sc.ep if spec.is_moe else 1)
    return None


# ---------------------------------------------------------------------------------------------------- costs
# (scenario, batch, tokens per sequence) -> (step seconds, of which the engine's per-step CPU seconds)
StepFn = Callable[[Scenario, int, int], tuple[float, float]]


@dataclass(frozen=True)
class HostCosts:
    """Host time of a speculative iteration that no CUDA graph covers and the launch counts leave out, seconds
    (the fitted numbers of the speculative model; values, bounds and what sets them: docs/plan.md).
    per_seq: per sequence and iteration (accepted-token bookkeeping in Python: SGLang's verify loop appends
    and checks each accepted token, vLLM builds per-request token lists; n-gram lookups run on the host).
    per_forward: per drafter forward (host attention-metadata planning and forward set-up, paid even where the
    draft loop replays a graph: SGLang 0.4.4 FlashInferMultiStepDraftBackend.init_forward_metadata_replay_cuda_graph
    plans every draft step on the host; vLLM 0.9.2 EagleProposer drives each step from Python)."""

    per_seq_s: float = 0.0
    per_forward_s: float = 0.0


@dataclass(frozen=True)
class SpecError:
    """Out-of-fold error of predicted speculative gains on the published pairs (leave one source out):
    q10, q90 of measured / predicted gain over `rows` scored rows (data/spec_host.toml)."""

    q10: float
    q90: float
    rows: int
    sources: int


def _host_doc() -> dict[str, dict[str, float]]:
    return tables.spec_host()


def load_host_costs() -> HostCosts:
    """The fitted HostCosts (data/spec_host.toml, written by data-build/fit_spec_host.py)."""
    h = _host_doc()["host"]
    return HostCosts(float(h["per_seq_s"]), float(h["per_forward_s"]))


@lru_cache(maxsize=1)
def spec_error() -> SpecError:
    """The cross-validated error of this model's gains (data/spec_host.toml [error])."""
    e = _host_doc()["error"]
    return SpecError(float(e["q10"]), float(e["q90"]), int(e["rows"]), int(e["sources"]))


HOST_COSTS = load_host_costs()


def model_step(context_len: float) -> StepFn:
    """The performance model's decode step at a fixed context (the default `StepFn`)."""

    def step(sc: Scenario, batch: int, tokens_per_seq: int) -> tuple[float, float]:
        pred = decode_step(sc, batch, int(context_len), tokens_per_seq=tokens_per_seq)
        return pred.step_time_s, pred.class_time_s.get("host", 0.0)

    return step


_EAGER: dict[int, tuple[Scenario, Scenario]] = {}


def _eager(sc: Scenario) -> Scenario:
    """`sc` without CUDA graphs (cached per object, so step caches keyed by identity keep hitting)."""
    hit = _EAGER.get(id(sc))
    if hit is None or hit[0] is not sc:
        if len(_EAGER) > 1024:
            _EAGER.clear()
        hit = (sc, replace(sc, cuda_graphs=False))
        _EAGER[id(sc)] = hit
    return hit[1]


def _graphs(sc: Scenario, batch: int, eng: Speculative) -> Scenario:
    """The scenario a speculative step runs as: eager above the engine's speculative capture limit."""
    return _eager(sc) if (eng.graph_max_batch and batch > eng.graph_max_batch) else sc


def _draft_s(draft: Scenario, batch: int, shape: SpecShape, step: StepFn, eng: Speculative) -> float:
    """First forward over the (k+1) verified tokens per sequence (eager where the engine runs it so), then
    depth−1 forwards of `width` tokens; the engine's per-step CPU time is paid once per iteration (in verify),
    not per drafter forward."""
    if shape.draft_forwards == 0:
        return 0.0
    loop_sc = _graphs(draft, batch, eng)
    first_sc = _eager(draft) if eng.first_forward_eager else loop_sc
    first, first_cpu = step(first_sc, batch, min(shape.k, shape.depth or shape.k) + 1)
    rest = 0.0
    if shape.draft_forwards > 1:
        t, cpu = step(loop_sc, batch, shape.width)
        rest = (shape.draft_forwards - 1) * (t - cpu)
    return first - first_cpu + rest


def _fixed(sc: Scenario, draft: Scenario | None, batch: int, shape: SpecShape, eng: Speculative,
           host: HostCosts) -> tuple[float, float, float, float]:
    """(launches, sampling, host sync, host bookkeeping) seconds per iteration (module docstring)."""
    steps_after_first = max(0, shape.draft_forwards - 1)
    ops = eng.eager_ops_per_iteration + (0 if eng.draft_loop_graphed else eng.eager_ops_per_draft_step
                                         * steps_after_first)
    launches = ops * sc.efficiency.launch_overhead_s
    vocab = float(sc.model.vocab_size)
    draft_vocab = float(draft.model.vocab_size) if draft is not None else 0.0
    sample_bytes = FP32_BYTES * (shape.draft_forwards * batch * shape.width * draft_vocab
                                 + SAMPLER_PASSES * batch * shape.k * vocab)
    sampling = sample_bytes / (float(sc.gpu.hbm_bw_bytes_per_s) * ELEMENTWISE_BW_FRACTION)
    bookkeeping = host.per_seq_s * batch + host.per_forward_s * shape.draft_forwards
    return launches, sampling, eng.host_syncs * HOST_SYNC_S, bookkeeping


def iteration(sc: Scenario, draft: Scenario | None, batch: int, shape: SpecShape, step: StepFn,
              host: HostCosts | None = None, engine: str | None = None) -> SpecIteration:
    """Price one speculative iteration of `batch` sequences (all dp ranks) with `step` (see StepFn), as
    `engine` (`spec_engine`: e.g. "sglang-0.4"; default the scenario's engine record: its backend and release)
    runs it."""
    if batch < 1:
        raise ScenarioError(f"speculative iteration: batch={batch}")
    eng = spec_engine(engine) if engine else sc.engine.speculative
    verify = step(_graphs(sc, batch, eng), batch, shape.k + 1)[0]
    draft_s = _draft_s(draft, batch, shape, step, eng) if draft is not None else 0.0
    launches, sampling, sync, book = _fixed(sc, draft, batch, shape, eng, host or HOST_COSTS)
    return SpecIteration(verify, draft_s, launches, sampling, sync, book)


@dataclass(frozen=True)
class SpecGain:
    base_step_s: float
    iteration: SpecIteration
    accepted_length: float

    @property
    def spec_tpot_s(self) -> float:
        return self.iteration.total_s / self.accepted_length

    @property
    def gain(self) -> float:
        """Baseline TPOT / speculative TPOT = t_base · AL / iteration."""
        return self.base_step_s / self.spec_tpot_s


def spec_gain(sc: Scenario, shape: SpecShape, accepted_length: float, batch: int, context_len: float,
              draft_model: str | None = None, draft_vocab: int | None = None,
              host: HostCosts | None = None, engine: str | None = None) -> SpecGain:
    """Decode-step gain of speculation at `batch` sequences of `context_len` tokens (no prefill interference:
    both sides pay it alike at steady state)."""
    if accepted_length < 1.0:
        raise ScenarioError(f"accepted length {accepted_length} < 1 (it counts the bonus token)")
    step = model_step(context_len)
    draft = draft_scenario(sc, shape.method, draft_model, draft_vocab)
    base = step(sc, batch, 1)[0]
    return SpecGain(base, iteration(sc, draft, batch, shape, step, host, engine), accepted_length)
