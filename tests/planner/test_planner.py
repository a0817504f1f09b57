"""Planner math with small fakes: target/forbid/acceptance parsing, speculative formulas, break-even, bounds,
the evaluator's serving formula, one-shot all-reduce and expert imbalance. Expected values are computed in the
tests from the formulas (or by simulation), never copied from program output."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.errors import PlanError
from servescope.perfmodel.speculative import SpecShape
from servescope.planner import (
    TRACK_KINDS,
    SpecConfig,
    parse_acceptance,
    parse_forbid,
    parse_spec_method,
)
from servescope.planner.speculative import (
    accepted_length,
    accepted_length_scalar,
    breakeven_concurrency,
    bundled_acceptance,
    positions_from_al,
)
from servescope.planner.target import parse_target
from servescope.planner.tracks_comm import custom_ar_call_s, expert_imbalance
from servescope.planner.whatif import Evaluator, SpecSetup, WhatIf, gain_bounds
from servescope.specs.engines import Engine, engine

# --- target ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "objective", "value"),
    [("8ms", "tpot", 8.0), ("8 ms", "tpot", 8.0), ("0.008s", "tpot", 8.0), ("8000us", "tpot", 8.0),
     ("1000tok/s", "throughput", 1000.0), ("1.5ktok/s", "throughput", 1500.0), ("250 tokens/s", "throughput", 250.0)],
)
def test_parse_target_units(text: str, objective: str, value: float) -> None:
    t = parse_target(text, objective)
    assert t.objective == objective
    assert t.value == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "objective", "words"),
    [("8ms", "throughput", "latency"), ("1000tok/s", "tpot", "rate"), ("8 parsecs", "tpot", "unknown unit"),
     ("fast", "tpot", "not a number"), ("0ms", "tpot", "positive"), ("8ms", "latency", "unknown objective")],
)
def test_parse_target_rejects(text: str, objective: str, words: str) -> None:
    with pytest.raises(PlanError, match=words) as err:
        parse_target(text, objective)
    assert "\n" not in str(err.value)


def test_target_met_and_shortfall() -> None:
    t = parse_target("8ms", "tpot")
    assert t.met_by(0.008, 0.0) and not t.met_by(0.0081, 0.0)
    assert t.shortfall(0.016, 0.0) == pytest.approx(2.0)
    r = parse_target("1000tok/s", "throughput")
    assert r.shortfall(0.0, 250.0) == pytest.approx(4.0)
    assert r.shortfall(0.0, 2000.0) == 1.0


# --- forbid / acceptance / spec method ---------------------------------------------------------------------


def test_parse_forbid() -> None:
    assert parse_forbid("quantization, cuda_graphs,quantization") == ("quantization", "cuda_graphs")
    assert parse_forbid(None) == ()
    with pytest.raises(PlanError) as err:
        parse_forbid("quantisation")
    assert "quantisation" in str(err.value)
    assert all(k in str(err.value) for k in TRACK_KINDS)


def test_parse_acceptance() -> None:
    assert parse_acceptance("0.8,0.6,0.4") == (0.8, 0.6, 0.4)
    assert parse_acceptance(rate=0.5, k=3) == pytest.approx((0.5, 0.25, 0.125))
    assert parse_acceptance() is None
    for kwargs, words in [
        ({"positions": "0.8", "rate": 0.5}, "not both"),
        ({"rate": 0.5}, "spec-k"),
        ({"positions": "0.5,0.7"}, "increase"),
        ({"positions": "1.2"}, r"\[0, 1\]"),
        ({"positions": "0.8,0.6", "k": 3}, "disagrees"),
        ({"positions": "a,b"}, "numbers"),
        ({"rate": 1.5, "k": 2}, "outside"),
    ]:
        with pytest.raises(PlanError, match=words):
            parse_acceptance(**kwargs)  # type: ignore[arg-type]


def test_spec_method_and_config() -> None:
    assert parse_spec_method("draft:llama-3.2-1b") == ("draft", "llama-3.2-1b")
    assert parse_spec_method("EAGLE-3") == ("eagle3", None)
    with pytest.raises(PlanError, match="unknown speculative method"):
        parse_spec_method("medusa")
    with pytest.raises(PlanError, match="draft model"):
        SpecConfig(method="draft")
    with pytest.raises(PlanError, match="only used with draft, eagle or eagle3"):
        SpecConfig(method="mtp", draft_model="x")
    assert SpecConfig(method="eagle3", draft_model="head.json").draft_model == "head.json"  # the head's config
    with pytest.raises(PlanError, match="disagrees"):
        SpecConfig(k=2, acceptance=(0.8, 0.6, 0.4))
    with pytest.raises(PlanError, match="outside 1..16"):
        SpecConfig(k=0)


def test_spec_from_cli_options() -> None:
    from servescope.planner import spec_from_options

    assert spec_from_options() is None
    cfg = spec_from_options("eagle3", None, "0.8,0.5,0.3", None)
    assert cfg == SpecConfig("eagle3", 3, (0.8, 0.5, 0.3), None)
    cfg = spec_from_options("draft:qwen3-0.6b", 4, None, 0.6)
    assert cfg is not None and cfg.method == "draft" and cfg.draft_model == "qwen3-0.6b"
    assert cfg.acceptance == pytest.approx((0.6, 0.36, 0.216, 0.1296))
    with pytest.raises(PlanError, match="not both"):
        spec_from_options("mtp", 2, "0.8,0.5", 0.5)
    with pytest.raises(PlanError, match="disagrees"):
        spec_from_options("mtp", 3, "0.8,0.5", None)


# --- speculative formulas ------------------------------------------------------------------------------------


@given(st.floats(0.0, 0.99), st.integers(1, 12))
def test_scalar_accepted_length_is_leviathan(a: float, k: int) -> None:
    """Σ_{i=0..k} a^i equals the closed form (1 − a^(k+1)) / (1 − a) (Leviathan et al. 2023, Eq. 1)."""
    assert accepted_length_scalar(a, k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    assert accepted_length([a**i for i in range(1, k + 1)]) == pytest.approx(accepted_length_scalar(a, k))


def test_bundled_kimi_eagle3_curve_matches_the_reference() -> None:
    """hardware-and-models.md §4a: AL(k) thinking off 1.80, 2.33, 2.75, ...; on 1.83, 2.43, 2.88, ...;
    Kimi-K2.6 EAGLE-3 real traffic per position 0.645 / 0.393 / 0.240."""
    acc = bundled_acceptance("kimi-k2.5", "eagle3")
    assert acc is not None and "IX-AL" in acc.source
    assert [round(acc.al(k), 6) for k in (1, 2, 3, 8)] == [1.80, 2.33, 2.75, 3.51]
    assert acc.al(3, "high") == pytest.approx(2.88)
    assert acc.al(3, "low") == pytest.approx(1 + 0.645 + 0.393 + 0.240)
    assert acc.al(5, "low") == pytest.approx(acc.al(3, "low"))  # unmeasured positions count as rejected
    assert bundled_acceptance("kimi-k2.5", "mtp") is None
    assert bundled_acceptance("llama-3.1-8b", "eagle3") is None


def test_positions_from_al_clips_non_monotone_curves() -> None:
    assert positions_from_al([1.8, 2.3, 2.2, 2.5]) == pytest.approx((0.8, 0.5, 0.0, 0.2))


def test_breakeven_interpolates_in_log_concurrency() -> None:
    def gain(c: int) -> float:
        return 2.0 - 0.3 * math.log2(c)  # crosses 1 at log2 c = 10/3, i.e. c = 2^(10/3) ≈ 10.08

    assert breakeven_concurrency(gain, 256) == pytest.approx(2 ** (10 / 3))
    assert breakeven_concurrency(lambda c: 1.5, 256) is None
    assert breakeven_concurrency(lambda c: 0.9, 256) == 1.0


@given(st.floats(0.05, 20.0), st.floats(0.0, 0.9))
def test_gain_bounds_contain_the_gain(gain: float, r: float) -> None:
    lo, hi = gain_bounds(gain, r)
    assert 0 < lo <= gain * (1 + 1e-12) and hi >= gain * (1 - 1e-12)
    assert (lo > 1.0) == (gain > 1.0) or r == 0.0 or abs(gain - 1.0) < 1e-9  # a gain does not flip sign


def test_gain_bounds() -> None:
    lo, hi = gain_bounds(1.25, 0.2)  # new 0.8, change 0.2, error 0.04
    assert (lo, hi) == (pytest.approx(1 / 0.84), pytest.approx(1 / 0.76))
    lo, hi = gain_bounds(10.0, 0.3)  # new 0.1, error 0.3 × 0.1: the remaining time bounds it
    assert (lo, hi) == (pytest.approx(1 / 0.13), pytest.approx(1 / 0.07))
    lo, hi = gain_bounds(0.8, 0.5)
    assert lo < 0.8 < hi < 1.0 + 1e-12


# --- the evaluator with a fake model ----------------------------------------------------------------------


@dataclass(frozen=True)
class FakeEff:
    prefill_interference: float = 1.0
    prefill_overhead_s: float = 0.002
    launch_overhead_s: float = 1e-5


@dataclass(frozen=True)
class FakeModelSpec:
    vocab_size: int = 1000


@dataclass(frozen=True)
class FakeGpu:
    hbm_bw_bytes_per_s: float = 1e12


@dataclass(frozen=True)
class FakeScenario:
    isl: int = 1000
    osl: int = 100
    dp: int = 1
    efficiency: FakeEff = field(default_factory=FakeEff)
    draft: bool = False
    decode_only: bool = False
    cuda_graphs: bool = False
    backend: str = "vllm"
    model: FakeModelSpec = field(default_factory=FakeModelSpec)
    gpu: FakeGpu = field(default_factory=FakeGpu)

    @property
    def decode_context(self) -> float:
        return float(self.isl) if self.decode_only else self.isl + self.osl / 2.0

    @property
    def engine(self) -> Engine:
        """The backend's newest engine record (its speculative counts price the iteration's fixed costs)."""
        return engine(self.backend)


@dataclass(frozen=True)
class FakePred:
    step_time_s: float
    terms_s: dict[str, float]
    dominant: str = "weights"
    collectives: dict[str, object] = field(default_factory=dict)
    class_time_s: dict[str, float] = field(default_factory=dict)
    floor_s: float = 0.0
    tokens: int = 1


class FakeModel:
    """Decode: 10 ms + 0.1 ms per token in the step (a tenth of it for the drafter); prefill 50 ms."""

    def decode(self, sc: FakeScenario, batch: int, context_len: float, tokens_per_seq: int = 1) -> FakePred:
        scale = 0.1 if sc.draft else 1.0
        t = scale * (0.010 + 0.0001 * batch * tokens_per_seq)
        return FakePred(t, {"weights": t})

    def prefill(self, sc: FakeScenario, tokens: int, batch: int = 1, context_len: float = 0) -> FakePred:
        return FakePred(0.050, {"compute": 0.050})

    def max_concurrency(self, sc: FakeScenario) -> int:
        return 64

    def interference(self, sc: FakeScenario, batch: int) -> float:
        """perfmodel's serving formula: interference share · (b − 1)/osl · (prefill + per-prefill overhead)."""
        eff = sc.efficiency
        return eff.prefill_interference * (batch - 1) / sc.osl * (0.050 + eff.prefill_overhead_s)

    def interference_share(self, sc: FakeScenario, batch: int) -> float:
        return sc.efficiency.prefill_interference * (batch - 1) / sc.osl

    def draft(self, sc: FakeScenario, method: str, draft_model: str | None) -> FakeScenario:
        return _draft(sc)


def _draft(sc: FakeScenario) -> FakeScenario:
    return FakeScenario(sc.isl, sc.osl, sc.dp, sc.efficiency, draft=True)


def test_evaluator_serving_formula_and_speculation() -> None:
    ev = Evaluator(FakeModel(), FakeScenario(), "tpot", 8)
    base = ev.at((), 8)
    interference = 1.0 * (8 - 1) / 100 * (0.050 + 0.002)
    assert base.tpot_s == pytest.approx(0.0108 + interference)
    spec = WhatIf("speculative_decoding", spec=SpecSetup(SpecShape("eagle3", 3), 2.5, "eagle3"))
    out = ev.at((spec,), 8)
    # verify 8×4 tokens; drafter: one forward over 8×4 tokens, two over 8; fixed (vLLM, specs/data/engines/vllm.toml speculative):
    # (38 + 21·2) eager launches of 10 µs, sampling 4 B × (3·8·1000 draft logits + 3·8·3·1000 rejection) at
    # 0.7 TB/s, three 19.9 µs syncs, and the fitted host costs: 8 sequences, 3 drafter forwards
    from servescope.perfmodel.speculative import HOST_COSTS

    verify = 0.010 + 0.0001 * 8 * 4
    draft = 0.1 * (0.010 + 0.0001 * 8 * 4) + 2 * 0.1 * (0.010 + 0.0001 * 8)
    fixed = (80 * 1e-5 + 4 * (3 * 8 * 1000 + 3 * 8 * 3 * 1000) / 0.7e12 + 3 * 19.9e-6
             + 8 * HOST_COSTS.per_seq_s + 3 * HOST_COSTS.per_forward_s)
    assert out.tpot_s == pytest.approx((verify + draft + fixed) / 2.5 + interference)
    assert out.output_tok_s == pytest.approx(8 / out.tpot_s)
    pd = WhatIf("pd_disaggregation", no_prefill_interference=True)
    assert ev.at((pd,), 8).tpot_s == pytest.approx(0.0108)
    assert ev.at((), 1000).concurrency == 64  # capped at the memory limit


def test_evaluator_throughput_objective_respects_the_tpot_limit() -> None:
    ev = Evaluator(FakeModel(), FakeScenario(), "throughput", 4)
    limit = ev.at((), 4).tpot_s
    best = ev.objective_value(())
    assert best.concurrency == 4 and best.tpot_s <= limit
    faster = WhatIf("cuda_graphs", adjust=lambda sc, v: v.shifted("weights", -0.005))
    out = ev.objective_value((faster,))
    assert out.tpot_s <= limit and out.concurrency > 4
    assert ev.gain(best, out) == pytest.approx(out.output_tok_s / best.output_tok_s)


# --- communication and expert helpers ---------------------------------------------------------------------------


def test_custom_allreduce_call_cost() -> None:
    # 8 PCIe GPUs, 14 KiB: one-shot 7.5 µs + 7 × 14336 B / 28 GB/s; two-shot 2·7.5 + 1.75 × 14336 / 28e9
    one = 7.5e-6 + 7 * 14336 / 28e9
    two = 15e-6 + 1.75 * 14336 / 28e9
    assert custom_ar_call_s(14336, 8, "pcie", 0.0) == pytest.approx(min(one, two))
    # large messages prefer two-shot
    big = 4 * 2**20
    assert custom_ar_call_s(big, 8, "pcie", 0.0) == pytest.approx(15e-6 + 1.75 * big / 28e9)
    nvl = custom_ar_call_s(14336, 8, "nvlink", 450e9)
    assert nvl == pytest.approx(4.6e-6 + 7 * 14336 / (0.78 * 450e9))


def test_expert_imbalance_against_simulation() -> None:
    """Batch-1 step of a 384-expert top-8 model on 8 GPUs: simulate whole-expert placement."""
    rng = random.Random(7)
    trials, total = 4000, 0
    for _ in range(trials):
        experts = rng.sample(range(384), 8)
        per_gpu = [0] * 8
        for e in experts:
            per_gpu[e // 48] += 1
        total += max(per_gpu)
    simulated = total / trials / 1.0  # mean activated experts per GPU is 8/8 = 1
    assert expert_imbalance(384, 8, 8, 1) == pytest.approx(simulated, rel=0.08)
    assert expert_imbalance(384, 8, 8, 100_000) == 1.0
    assert expert_imbalance(384, 8, 1, 1) == 1.0


def test_pays_again_after_a_dip() -> None:
    """A MoE gain curve can dip below 1 and recover (B·(k+1) tokens add experts only until every expert is read)."""
    from servescope.planner.tracks_spec import pays_again_at

    def dip(c: int) -> float:
        return {1: 1.5, 2: 1.1, 4: 0.9, 8: 0.95, 16: 1.2, 32: 1.3}[c]

    stop = breakeven_concurrency(dip, 32)
    assert stop is not None and 2 < stop < 4
    assert pays_again_at(dip, stop, 32) == 16.0
    assert pays_again_at(lambda c: 2.0 / c, breakeven_concurrency(lambda c: 2.0 / c, 32), 32) is None
    assert pays_again_at(dip, None, 32) is None
