"""The plan on the real performance model: Kimi-K2.5 INT4 at TP=8 on 8x RTX PRO 6000 Server (PCIe), the
speculative gain derived by hand from the bundled Kimi-K2.5 EAGLE-3 curve, where speculation stops paying,
targets, bad combinations and the JSON document. Efficiencies are fixed (Efficiency()) so refits of the
model's defaults do not move these expectations."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servescope.errors import PlanError
from servescope.perfmodel import TERMS, Efficiency, Scenario, decode_step
from servescope.perfmodel.speculative import HOST_COSTS, eagle_head
from servescope.planner import (
    TRACK_KINDS,
    SpecConfig,
    combine,
    parse_acceptance,
    plan,
)
from servescope.planner.whatif import PerfModel
from servescope.report.plan_doc import plan_document
from servescope.report.plan_text import plan_lines
from servescope.specs import quant as q

# hardware-and-models.md §4a, IX-AL kimik2.5_eagle3.yaml, thinking off: AL(k) for k = 1..8
KIMI_EAGLE3_AL = [1.80, 2.33, 2.75, 3.06, 3.25, 3.43, 3.46, 3.51]


@pytest.fixture(scope="module")
def kimi() -> Scenario:
    # the reference box runs a vLLM build that allows one-shot all-reduce on 8 PCIe GPUs (R6K-ONESHOT was measured on
    # it): `+pcie-ar` (the newest release's curves), else vLLM's own gate refuses custom all-reduce (issue 28)
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="native", efficiency=Efficiency(),
                          engine_version="+pcie-ar")


@pytest.fixture(scope="module")
def kimi_plan(kimi: Scenario):  # type: ignore[no-untyped-def]
    return plan(kimi, objective="tpot", concurrency=1, forbid="quantization")


def test_scenario_is_int4_experts_on_pcie(kimi: Scenario) -> None:
    assert kimi.quant.experts.name == "int4-w4a16" and kimi.quant.attention.name == "bf16"
    assert kimi.gpu.interconnect == "pcie" and kimi.tp == 8


def test_communication_dominates_the_baseline(kimi_plan) -> None:  # type: ignore[no-untyped-def]
    step = kimi_plan.baseline.step
    # 2 all-reduces per layer (61 layers) + the vocab-parallel embedding one, ~27 µs each on 8 PCIe GPUs
    assert step.collectives["all_reduce"].calls_per_step == 2 * 61 + 1
    # one of the two largest kernel classes, beside the dense GEMMs (which read the replicated MLA projections and,
    # since issue 18, the 0.33 GB of router weights every rank reads every step); the per-kernel overhead
    # (1,559 kernels x 2 us) is as large, so any of them may be the dominant class
    kernel_classes = {k: v for k, v in step.class_time_s.items() if k not in ("kernel_overhead", "host")}
    assert "communication" in sorted(kernel_classes, key=kernel_classes.__getitem__)[-2:]
    assert kimi_plan.dominant_class in ("communication", "overhead", "gemm")
    comm = step.class_time_s["communication"]
    assert comm > step.class_time_s["moe"]
    assert comm / kimi_plan.baseline.tpot_s > 0.25
    doc = plan_document(kimi_plan)
    assert doc["baseline"]["dominant"] == max(step.terms_s, key=step.terms_s.get)


def test_with_the_shipped_efficiencies_communication_is_a_quarter_of_the_step() -> None:
    """The shipped defaults use the measured all-reduce curve as measured (no fitted in-situ multiplier, issue 7):
    123 all-reduces at ~27 µs are over a quarter of the step."""
    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="native")
    p = plan(sc, concurrency=1, forbid="quantization")
    assert p.baseline.step.terms_s["communication"] / p.baseline.step.step_time_s > 0.25
    order = [t.kind for t in p.tracks]
    assert order.index("speculative_decoding") < order.index("expert_parallel")
    # stock vLLM refuses custom all-reduce on 8 PCIe-only GPUs (issue 28): not applicable; a build that lifts the
    # gate (`+pcie-ar`) is priced, and ranks before expert parallelism
    assert not p.track("custom_allreduce").applicable
    patched = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="native", engine_version="+pcie-ar")
    order = [t.kind for t in plan(patched, concurrency=1, forbid="quantization").tracks]
    assert order.index("custom_allreduce") < order.index("expert_parallel")


def test_ranking_on_pcie_at_batch_1(kimi_plan) -> None:  # type: ignore[no-untyped-def]
    order = [t.kind for t in kimi_plan.tracks]
    assert set(order) == set(TRACK_KINDS)
    assert order.index("custom_allreduce") < order.index("expert_parallel")
    assert order.index("speculative_decoding") < order.index("expert_parallel")
    ep = kimi_plan.track("expert_parallel")
    assert ep.applicable and ep.gain is not None and ep.gain < 1.0
    assert ep.why_not is not None
    assert all(w in ep.why_not for w in ("PCIe", "all-to-all", "batch 1"))
    car = kimi_plan.track("custom_allreduce")
    assert car.pays and car.effort == "engine upgrade"
    assert any("more than two PCIe" in p for p in car.preconditions)


def test_forbidden_quantization_is_not_recommended(kimi_plan) -> None:  # type: ignore[no-untyped-def]
    quant = kimi_plan.track("quantization")
    assert not quant.applicable and "forbidden" in (quant.why_not or "")
    assert "quantization" not in kimi_plan.combined.tracks
    assert "quantization" not in kimi_plan.ceiling.tracks
    doc = plan_document(kimi_plan)
    assert [t for t in doc["tracks"] if t["kind"] == "quantization"][0]["gain"] is None


def _hand_iteration(sc: Scenario, batch: int, k: int) -> float:
    """One EAGLE-3 iteration from the perfmodel.speculative docstring: verify + drafter forwards (the
    first over k+1 tokens, k−1 more over 1, none with the engine's CPU time) + launches, sampling, host syncs
    (vLLM's counts in specs/data/engines/vllm.toml speculative: 38 per iteration + 21 per drafter step after the first, 3 syncs)
    + the fitted host costs (per sequence, per drafter forward)."""
    ctx = sc.isl + sc.osl / 2

    def step(s: Scenario, tokens: int) -> tuple[float, float]:
        p = decode_step(s, batch, ctx, tokens_per_seq=tokens)
        return p.step_time_s, p.class_time_s["host"]

    verify = step(sc, k + 1)[0]  # CUDA-graph padding of the B·(k+1) tokens is inside decode_step
    b16 = q.SCHEMES["bf16"]
    draft_sc = replace(sc, model=eagle_head(sc.model), quant=q.QuantConfig(b16, b16, b16, b16, b16, sc.quant.kv),
                       ep=1)
    first, rest = step(draft_sc, k + 1), step(draft_sc, 1)
    draft = first[0] - first[1] + (k - 1) * (rest[0] - rest[1])
    launches = (38 + 21 * (k - 1)) * sc.efficiency.launch_overhead_s
    vocab = sc.model.vocab_size
    sampling = 4 * (k * batch * vocab + 3 * batch * k * vocab) / (0.7 * sc.gpu.hbm_bw_bytes_per_s)
    host = HOST_COSTS.per_seq_s * batch + HOST_COSTS.per_forward_s * k
    return verify + draft + launches + sampling + 3 * 19.9e-6 + host


def _hand_gain(sc: Scenario, batch: int, k: int, al: float | None = None) -> float:
    """baseline TPOT / speculative TPOT from decode_step and the reference curve; both sides carry the same
    prefill interference (other requests' prefills, perfmodel.predict's formula), zero at batch 1."""
    extra = PerfModel().interference(sc, batch) if batch > 1 else 0.0
    base = decode_step(sc, batch, sc.isl + sc.osl / 2).step_time_s + extra
    return base / (_hand_iteration(sc, batch, k) / (al or KIMI_EAGLE3_AL[k - 1]) + extra)


def test_speculative_gain_by_hand(kimi: Scenario, kimi_plan) -> None:  # type: ignore[no-untyped-def]
    spec = kimi_plan.track("speculative_decoding")
    k = spec.details["k"]
    assert spec.details["accepted_length"] == pytest.approx(KIMI_EAGLE3_AL[k - 1])
    assert spec.gain == pytest.approx(_hand_gain(kimi, 1, k), rel=1e-9)  # c = 1: no prefill interference
    assert spec.gain_low < spec.gain < spec.gain_high
    best_k = max(range(1, 9), key=lambda kk: _hand_gain(kimi, 1, kk))
    assert k == best_k
    # the gain falls with concurrency: verifying (k+1) tokens per sequence stops being free. For a sparse MoE
    # the first cause is experts: B·(k+1) tokens touch more of the 384 experts than B tokens do ...
    # (on the datasheet's expert roofline: the measured Marlin expert curve, on by its domain since issue 27, steps
    # with the tokens' tile sizes and can break the order)
    roof = kimi.with_(efficiency=kimi.efficiency.scaled(moe_curve=0.0))
    gains = [_hand_gain(roof, c, k) for c in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(gains, gains[1:], strict=False))
    # ... until every expert is read anyway, when the extra tokens are nearly free again — where the engine verifies
    # with its decode kernel (SGLang); vLLM's Triton MLA on this GPU runs the verify block through its MLA prefill
    # path (specs/data/engines/vllm.toml), whose context up-projection grows with the batch: there the gain keeps falling
    sglang = kimi.with_(backend="sglang")
    assert _hand_gain(sglang, 64, k) > _hand_gain(sglang, 8, k)
    assert _hand_gain(roof, 64, k) < gains[-1]


def test_speculation_stops_paying_at_high_concurrency() -> None:
    sc = Scenario.build("llama-3.1-70b", "h100_sxm", tp=4, quant="fp8", efficiency=Efficiency())
    spec = SpecConfig("eagle3", k=3, acceptance=parse_acceptance(rate=0.5, k=3))
    p = plan(sc, concurrency=1, spec=spec)
    t = p.track("speculative_decoding")
    stop = t.details["breakeven_concurrency"]
    assert stop is not None and 1 < stop < t.details["max_concurrency_checked"]
    al = 1 + 0.5 + 0.25 + 0.125
    assert _hand_gain(sc, 1, 3, al) > 1.0 > _hand_gain(sc, int(stop * 1.3), 3, al)
    assert _hand_gain(sc, max(1, int(stop / 1.3)), 3, al) > 1.0


def test_far_target_is_not_reachable(kimi: Scenario) -> None:
    p = plan(kimi, concurrency=1, forbid="quantization", target="1ms")
    assert p.target is not None and not p.target.reachable
    assert "not reachable" in p.target.text and p.ceiling.binding in p.target.text
    doc = plan_document(p)
    assert doc["target"]["reachable"] is False and doc["target"]["gap"] > 1.0
    assert doc["target"]["value"] == pytest.approx(1.0)
    assert doc["ceiling"]["binding"] in TERMS
    assert doc["ceiling"]["tpot_ms"] <= doc["combined"]["tpot_ms"] <= doc["baseline"]["tpot_ms"]
    lines = plan_lines(p)
    assert "uncalibrated" in lines[0]
    assert any("not reachable" in line for line in lines)


def test_near_target_is_reachable_with_named_tracks(kimi: Scenario, kimi_plan) -> None:  # type: ignore[no-untyped-def]
    goal_ms = kimi_plan.baseline.tpot_s * 1e3 * 0.9
    p = plan(kimi, concurrency=1, forbid="quantization", target=f"{goal_ms:.3f}ms")
    assert p.target is not None and p.target.reachable and p.target.gap == 1.0
    assert p.target.tracks and set(p.target.tracks) <= set(p.combined.tracks)


def test_bad_combinations_and_inputs(kimi: Scenario, kimi_plan) -> None:  # type: ignore[no-untyped-def]
    for kinds, words in [(["expert_parallel", "parallelism_change"], "parallel layout"),
                         (["quantization"], "does not apply"), (["warp_speed"], "unknown track"),
                         (["cuda_graphs"], "does not apply")]:
        with pytest.raises(PlanError, match=words) as err:
            combine(kimi_plan, kinds)
        assert "\n" not in str(err.value)
    with pytest.raises(PlanError, match="rate"):
        plan(kimi, objective="tpot", target="1000tok/s")
    with pytest.raises(PlanError, match="unknown track"):
        plan(kimi, forbid="quantisation")
    with pytest.raises(PlanError, match="no MTP layers|exceeds"):
        p = plan(kimi, spec=SpecConfig("eagle3", k=12))
    p = plan(kimi, spec=SpecConfig("mtp"))
    assert "no MTP layers" in (p.track("speculative_decoding").why_not or "")
    both = combine(kimi_plan, ["speculative_decoding", "custom_allreduce"])
    assert both.gain > max(kimi_plan.track("custom_allreduce").gain, 1.0)


def test_document_shape_and_determinism(kimi: Scenario, kimi_plan) -> None:  # type: ignore[no-untyped-def]
    doc = plan_document(kimi_plan)
    # The keys come first; later keys (objective, concurrency, tpot_limit_ms, calibration, warnings) extend.
    assert list(doc)[:7] == ["schema", "calibrated", "baseline", "tracks", "combined", "ceiling", "target"]
    assert doc["calibration"] is None and doc["objective"] == "tpot" and doc["concurrency"] == 1
    assert doc["schema"] == "servescope.plan/1" and doc["calibrated"] is False and doc["target"] is None
    assert set(doc["baseline"]) == {"tpot_ms", "output_tok_s", "dominant", "concurrency", "basis"}
    assert set(doc["combined"]) == {"tracks", "tpot_ms", "output_tok_s", "gain", "concurrency", "basis"}
    assert set(doc["ceiling"]) == {"tpot_ms", "output_tok_s", "binding", "tracks", "concurrency", "basis",
                                   "floor_step_ms"}
    for t in doc["tracks"]:
        assert set(t) == {"kind", "applicable", "why_not", "gain", "gain_low", "gain_high", "effort",
                          "preconditions", "validate"}
        assert t["effort"] in ("config change", "engine upgrade", "new kernel")
        if t["gain"] is not None:
            assert t["gain_low"] <= t["gain"] <= t["gain_high"]
    gains = [t["gain"] for t in doc["tracks"] if t["gain"] is not None]
    assert gains == sorted(gains, reverse=True)
    assert plan_document(plan(kimi, concurrency=1, forbid="quantization")) == doc


def test_throughput_objective(kimi: Scenario) -> None:
    p = plan(kimi, objective="throughput", concurrency=32, forbid="quantization", target="50tok/s")
    base = p.baseline
    assert base.output_tok_s == pytest.approx(base.concurrency / base.tpot_s)
    assert p.combined.gain >= max([t.gain for t in p.tracks if t.pays] or [1.0]) - 1e-9
    assert p.target is not None and p.target.reachable


def test_mtp_and_draft_model_drafters() -> None:
    """DeepSeek-V3 has one MTP layer: the planner picks MTP with the tech report's 85-90 % second-token
    acceptance (AL 1.875, k = 1). A draft model is priced as its own model at the target's TP."""
    ds = Scenario.build("deepseek-v3", "h200_sxm", tp=8, quant="native", efficiency=Efficiency())
    t = plan(ds, concurrency=1).track("speculative_decoding")
    assert t.details["method"] == "mtp" and t.details["k"] == 1
    assert t.details["accepted_length"] == pytest.approx(1.875)
    assert 1.0 < t.gain < 1.875
    llama = Scenario.build("llama-3.1-70b", "h100_sxm", tp=4, quant="fp8", efficiency=Efficiency())
    spec = SpecConfig("draft", k=4, acceptance=parse_acceptance(rate=0.6, k=4), draft_model="llama-3.1-8b")
    d = plan(llama, concurrency=1, spec=spec).track("speculative_decoding")
    assert d.applicable and d.details["k"] == 4
    assert d.details["accepted_length"] == pytest.approx(1 + 0.6 + 0.36 + 0.216 + 0.1296)
    assert "llama-3.1-8b" in d.validate
    no_acc = plan(llama, concurrency=1, spec=SpecConfig("draft", draft_model="llama-3.1-8b"))
    assert "no measured acceptance" in (no_acc.track("speculative_decoding").why_not or "")


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "quant", "c"),
    [("llama-3.1-8b", "h100_sxm", 1, "bf16", 8), ("qwen3-30b-a3b", "rtx_pro_6000_server", 2, "bf16", 32),
     ("deepseek-v3", "h200_sxm", 8, "native", 64), ("gpt-oss-120b", "l40s", 4, "native", 1)],
)
def test_plans_across_systems_are_consistent(model: str, gpu: str, tp: int, quant: str, c: int) -> None:
    sc = Scenario.build(model, gpu, tp=tp, quant=quant, efficiency=Efficiency())
    p = plan(sc, concurrency=c)
    for t in p.tracks:
        if t.gain is None:
            assert not t.applicable and t.why_not
            continue
        assert t.gain_low <= t.gain <= t.gain_high
        if t.kind in ("custom_allreduce", "nccl_tuning", "collective_fusion", "cuda_graphs"):
            assert t.gain >= 1.0 - 1e-9, t.kind  # these only take time away
    assert p.combined.gain >= 1.0
    assert p.ceiling.outcome.tpot_s <= p.combined.outcome.tpot_s * (1 + 1e-9)
    if tp == 1:
        assert not p.track("custom_allreduce").applicable and not p.track("nccl_tuning").applicable


@pytest.mark.parametrize(
    ("gpu", "length", "bound"),
    [("b200_sxm", 256, "compute|weights"),  # NVLink: the (k+1)·B verification tokens: compute, beside the expert reads
     ("rtx_pro_6000_server", 128, "communication")],  # PCIe: their all-reduce bytes saturate the bus first
)
def test_kimi_eagle3_gain_crosses_one_where_verification_stops_being_free(gpu: str, length: int, bound: str) -> None:
    """Kimi-K2.5 INT4 at TP=8 with short requests (so KV capacity allows large batches): the bundled EAGLE-3
    curve's gain, derived by hand, falls with concurrency and crosses 1.0 once verifying k+1 tokens per sequence
    is no longer free — bound by compute over NVLink, by all-reduce bandwidth over PCIe."""
    sc = Scenario.build("kimi-k2.5", gpu, tp=8, moe_quant="int4-w4a16", isl=length, osl=length)
    t = plan(sc, concurrency=1).track("speculative_decoding")
    k, stop = t.details["k"], t.details["breakeven_concurrency"]
    assert stop is not None and 1 < stop < t.details["max_concurrency_checked"]
    high = int(stop * 2)  # margin: the hand gain leaves out the planner's expert-imbalance adjustment
    assert _hand_gain(sc, 1, k) > 1.3 > 1.0 > _hand_gain(sc, high, k)  # pays clearly at batch 1, not at `high`
    assert _hand_gain(sc, 1, k) > _hand_gain(sc, int(stop / 2), k) > _hand_gain(sc, high, k)
    ctx = sc.isl + sc.osl / 2
    terms = decode_step(sc, high, ctx, tokens_per_seq=k + 1).terms_s
    # the GPU term that binds (beyond the capture range the step runs eagerly and its launch overhead may be larger)
    assert max((t for t in terms if t != "overhead"), key=terms.__getitem__) in bound.split("|")


def test_async_scheduling_gain_is_the_hidden_cpu_time(kimi: Scenario) -> None:
    """vLLM 0.12 (async scheduling opt-in): the track hides the step's CPU time behind the GPU's but for the share an
    overlapping scheduler leaves exposed (overlap_exposed_frac), so the TPOT gain is step / (GPU + f·CPU), computed
    here from the decode step's own terms."""
    kimi = kimi.with_(engine_version="0.12.0")
    t = plan(kimi, concurrency=1, forbid="quantization").track("async_scheduling")
    assert t.applicable and t.gain is not None
    eff = kimi.efficiency
    ctx = kimi.isl + kimi.osl // 2
    step = decode_step(kimi, 1, ctx).step_time_s
    cpu = eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * 1
    gpu = step - cpu
    assert gpu > cpu > 0
    want = step / (gpu + eff.overlap_exposed_frac * cpu)
    # the plan's TPOT is the serving TPOT (decode step + no interference at c = 1): the same ratio within rounding
    assert t.gain == pytest.approx(want, rel=0.02)
    assert "CPU time" in t.note


def test_async_scheduling_does_not_apply_where_the_engine_overlaps_already(kimi: Scenario) -> None:
    trt = plan(kimi.with_(backend="trtllm"), objective="tpot", concurrency=1, forbid="quantization")
    t = trt.track("async_scheduling")
    assert not t.applicable and "already on" in (t.why_not or "")
    sg = plan(kimi.with_(backend="sglang"), objective="tpot", concurrency=1, forbid="quantization")
    t = sg.track("async_scheduling")
    assert not t.applicable and "sglang" in (t.why_not or "") and "already on" in (t.why_not or "")
    new = plan(kimi.with_(engine_version="0.16.0"), objective="tpot", concurrency=1, forbid="quantization")
    t = new.track("async_scheduling")  # vLLM >= 0.14: on by default, so no track for it (issue 18)
    assert not t.applicable and "0.14.0" in (t.why_not or "")
    on = plan(kimi.with_(overlap_scheduler=True), objective="tpot", concurrency=1, forbid="quantization")
    assert not on.track("async_scheduling").applicable
