"""Speculative gains predicted vs the published with/without pairs (tests/data/planner/spec_pairs.csv).

Each CSV row is checked against the reference line it cites (the measured gain, or the numbers it is derived
from, computed here); then the model's gains are scored, cross-validated (leave one source out) and in-sample.
The shares within ±20 % asserted below are floors one row under what this model achieved when the test was
last updated (19 of 23 cross-validated, 23 of 23 in-sample on 2026-11-30; docs/plan.md has the table and why the
rest miss), leaving one row of room for refits of the step model. The gains move with the
perfmodel: after a refit, rerun bench/bench_speculative.py (it refits the two host costs, rewrites
specs/data/spec_host.toml and the table) and update the floors to what it prints."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.perfmodel import Scenario
from servescope.validation.spec_fit import fit_report
from servescope.validation.spec_pairs import (
    TOLERANCE,
    all_terms,
    evaluate,
    load_pairs,
    model_gain,
    pair_terms,
    share_within,
    source_key,
)

DATA = Path(__file__).parents[1] / "data" / "planner"
PAIRS = load_pairs(DATA / "pairs_ledger.csv")
LINES = (DATA / "speculative-decoding-measured.md").read_text(encoding="utf-8").splitlines()
_QWEN_MOE = Scenario.build("qwen3-30b-a3b", "h100_sxm", tp=2)
ACHIEVED_CV = 18  # rows within ±20 % (or on the right side of a bound) out of fold, bench/bench_speculative.py
# the same with the host costs fitted on every row: 23 before issue 18's staged fit, 21 since it holds the eager
# launch cost at the roofline stage's 11 µs (the iteration's eager ops cost more; out of fold 20 -> 19)
ACHIEVED_IN_SAMPLE = 21


def _derived(pair_id: str, line: str) -> float | None:
    """Gains the source states through other numbers on the cited line, recomputed from them."""
    if pair_id == "v20780_l8":
        assert "TPOT 7.07 ms" in line and "4.05 ms" in line
        return 7.07 / 4.05
    if pair_id == "s4716_l70_tree":
        assert "88.61 tok/s" in line and "234.54 tok/s" in line
        return 234.54 / 88.61
    if pair_id in ("sdb_8b_bs32", "sdb_70b_bs32"):
        assert "falls 4.3% (8B) and 14.0% (70B)" in line
        return 1.0 - (0.043 if "8b" in pair_id else 0.140)
    if pair_id in ("sdb_8b_bs1", "sdb_70b_bs1"):
        return 1.0  # normalised anchor of the two rows above
    if pair_id == "sdb_q3_tree_bs64":
        assert "below 1.0x on all workloads" in line
        return 1.0
    return None


@pytest.mark.parametrize("pair", PAIRS, ids=[p.id for p in PAIRS])
def test_every_row_restates_its_cited_line(pair) -> None:  # type: ignore[no-untyped-def]
    line = LINES[pair.source_line - 1]
    assert line.startswith(f"| {pair.ref_row} |"), (pair.id, line[:40])
    assert pair.source.split()[0] in line
    derived = _derived(pair.id, line)
    if derived is not None:
        assert pair.measured == pytest.approx(derived, abs=5e-4)
    else:
        assert f"{pair.measured:.2f}x" in line, (pair.id, pair.measured)
    if pair.al is not None and pair.kind == "gain":
        assert f"{pair.al:.2f}" in line  # the AL the row uses is the one the source states


def test_ratio_rows_do_not_depend_on_acceptance() -> None:
    """gain = t_base · AL / iteration, so a ratio of gains on one setup is the same for any AL."""
    pair = next(p for p in PAIRS if p.kind == "ratio")
    ratios = [model_gain(replace(pair, al=al)) / model_gain(replace(pair, al=al), 2) for al in (1.5, 3.0)]
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-12)


def test_predicted_vs_measured_share_within_twenty_percent() -> None:
    rep = fit_report(PAIRS)
    for results in (rep.in_sample, rep.out_of_fold):
        assert [r.pair.id for r in results] == [p.id for p in PAIRS]
        for r in results:
            if r.error is not None:
                assert r.error == pytest.approx(r.predicted / r.pair.measured - 1.0)
                assert r.within == (abs(r.error) <= TOLERANCE)
            if r.pair.kind == "below":
                assert r.within == (r.predicted < r.pair.measured)
    _, scored = share_within(rep.out_of_fold)
    assert scored == sum(1 for p in PAIRS if p.kind != "anchor") == 23
    assert sum(1 for p in PAIRS if p.batch >= 16) == 14  # all scored
    assert share_within(rep.out_of_fold)[0] >= ACHIEVED_CV, [(r.pair.id, round(r.predicted, 2))
                                                             for r in rep.out_of_fold]
    assert share_within(rep.in_sample)[0] >= ACHIEVED_IN_SAMPLE


def test_the_shipped_host_costs_are_this_fit() -> None:
    """specs/data/spec_host.toml holds a fit of fit_report on the CSV (bench/bench_speculative.py wrote it):
    within a factor of two of a refit on today's step model (a refit of the perfmodel's efficiencies moves it by
    tens of percent; a stale placeholder or a hand-edited value would be further off), inside its bounds and not
    at one; its error quantiles are out-of-fold ones of that fit and bracket 1."""
    from servescope.perfmodel.speculative import load_host_costs, spec_error
    from servescope.validation.spec_fit import BOUNDS

    rep, shipped = fit_report(PAIRS), load_host_costs()
    for name, (lo, hi) in BOUNDS.items():
        now, ship = getattr(rep.host, name), getattr(shipped, name)
        assert lo < now < hi * 0.9 and lo < ship < hi * 0.9, (name, now, ship)
        assert 0.5 < ship / now < 2.0, (name, now, ship)
    err = spec_error()
    assert (err.q10, err.q90) == pytest.approx(rep.ratio_q, rel=0.1)
    assert err.q10 < 1.0 < err.q90 and err.rows == sum(1 for r in rep.out_of_fold if r.error is not None)


def test_a_fold_never_sees_its_own_source() -> None:
    """Leave one source out: changing every measured gain of one source leaves that fold's fit unchanged."""
    from servescope.validation.spec_fit import fit_host

    terms = all_terms(PAIRS)
    scored = [p for p in PAIRS if p.kind != "anchor"]
    keep = [p for p in scored if source_key(p) != "V20780"]
    moved = [replace(p, measured=p.measured * 1.5) if source_key(p) == "V20780" else p for p in PAIRS]
    assert fit_host(PAIRS, keep, terms) == fit_host(moved, keep, terms)
    assert fit_host(PAIRS, scored, terms) != fit_host(moved, [replace(p, measured=p.measured * 1.5)
                                                               if source_key(p) == "V20780" else p for p in scored],
                                                      terms)


def test_host_costs_enter_the_gain_as_priced() -> None:
    """PairTerms.gain (closed form) equals a full spec_gain with the same host costs."""
    from servescope.perfmodel.speculative import HostCosts, SpecShape, spec_gain

    host = HostCosts(50e-6, 0.5e-3)
    for pair in (p for p in PAIRS if p.id in ("v20780_l8", "e3_sgl_bs48", "tng_scout_bs4")):
        sc = Scenario.build(pair.model, pair.gpu, tp=pair.tp, quant=pair.quant, backend=pair.backend,
                            isl=int(pair.context_len), osl=1, check_memory=False)
        full = spec_gain(sc, SpecShape(pair.method, pair.k, pair.depth, pair.width), pair.al or 1.0, pair.batch,
                         pair.context_len, draft_vocab=pair.draft_vocab, host=host, engine=pair.engine)
        assert pair_terms(pair).gain(host) == pytest.approx(full.gain, rel=1e-12)
        assert full.iteration.host_s == pytest.approx(host.per_seq_s * pair.batch
                                                      + host.per_forward_s * SpecShape(pair.method, pair.k,
                                                                                       pair.depth).draft_forwards)


def test_sglang_04_speculation_runs_eagerly_above_its_capture_limit() -> None:
    """SGLang 0.4.4 captured speculative graphs for 1..32 sequences only (specs/data/engines/sglang.toml, `sglang-0.4`):
    at 33 the verify step pays eager launches, at 32 it replays a graph. SGLang 0.5.9 (`sglang`, the backend's
    default entry) and vLLM pad into their ordinary capture sizes."""
    from servescope.perfmodel.speculative import SpecShape, model_step, spec_engine, spec_gain

    assert spec_engine("sglang-0.4").graph_max_batch == 32
    assert spec_engine("sglang").graph_max_batch == spec_engine("vllm").graph_max_batch == 0
    shape, step = SpecShape("eagle3", 3), model_step(512)
    sgl = Scenario.build("llama-3.1-8b", "h100_sxm", backend="sglang", isl=512, osl=1)
    eager = step(replace(sgl, cuda_graphs=False), 33, 4)[0]
    assert eager > step(sgl, 33, 4)[0]
    assert spec_gain(sgl, shape, 2.0, 33, 512, engine="sglang-0.4").iteration.verify_s == pytest.approx(eager)
    assert spec_gain(sgl, shape, 2.0, 32, 512, engine="sglang-0.4").iteration.verify_s == pytest.approx(
        step(sgl, 32, 4)[0])
    assert spec_gain(sgl, shape, 2.0, 33, 512).iteration.verify_s == pytest.approx(step(sgl, 33, 4)[0])


def test_an_unknown_engine_lists_the_known_ones() -> None:
    from servescope.errors import BadConfig
    from servescope.perfmodel.speculative import spec_engine

    with pytest.raises(BadConfig, match=r"older than every entry.*known: 0\.4\.0, 0\.5\.9"):
        spec_engine("sglang-0.1")
    with pytest.raises(BadConfig, match="known: vllm, sglang, trtllm"):
        spec_engine("tgi")
    from servescope.specs.engines import ENGINES as BACKENDS  # the engines a scenario can name

    for name in ("sglang", "sglang-0.4", "trtllm", "vllm"):
        assert spec_engine(name).source.strip()  # every entry says where its numbers come from
    assert all(spec_engine(b).host_syncs >= 1 for b in BACKENDS)  # every backend a scenario can name is priced
    # a release between two entries takes the earlier one (0.4.4's counts until 0.5.9 was read)
    assert spec_engine("sglang-0.5.2") == spec_engine("sglang-0.4") != spec_engine("sglang-0.5.9")


def test_eagle3_heads_read_twice_the_input_projections_and_their_own_vocabulary() -> None:
    """EAGLE-3: q/k/v fed [embedding, hidden] (2h), 3h→h fusion, LM head over the draft vocabulary;
    EAGLE-1: 2h→h fusion and the target's LM head (vLLM EagleProposer.load_model shares it)."""
    from servescope.perfmodel.speculative import eagle_head

    t = Scenario.build("llama-3.1-8b", "h100_sxm").model
    h, qkv = t.hidden_size, t.hidden_size * (t.n_heads + 2 * t.n_kv_heads) * t.head_dim
    e3, e1 = eagle_head(t, "eagle3", 32000), eagle_head(t, "eagle")
    assert e3.params.attention - e1.params.attention == pytest.approx(qkv)
    assert (e3.vocab_size, e3.params.lm_head) == (32000, 32000 * h)
    assert (e1.vocab_size, e1.params.lm_head) == (t.vocab_size, t.params.lm_head)
    assert e3.params.dense_mlp - e1.params.dense_mlp == pytest.approx(h * h)


def test_drafter_heads_follow_the_target_architecture() -> None:
    """An EAGLE-3 head for an MLA model (Kimi-K2.5) is one MLA layer: its KV per token is the latent
    (kv_lora_rank + rope dims) of one layer, not GQA heads; for a GQA model (Llama-3.1-8B) one GQA layer. Both
    are dense (no experts), BF16, and carry the 3h→h fusion GEMM on top of the dense MLP."""
    from servescope.perfmodel import Scenario, kv_bytes_per_seq
    from servescope.perfmodel.speculative import draft_scenario

    kimi = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16")
    head = draft_scenario(kimi, "eagle3")
    assert head is not None
    m, t = head.model, kimi.model
    assert (m.attention_kind, m.n_layers, m.kv_lora_rank) == ("mla", 1, t.kv_lora_rank)
    assert not m.is_moe and head.ep == 1 and head.quant.dense_mlp.name == "bf16"
    h = t.hidden_size
    assert m.params.dense_mlp == 3 * h * t.intermediate_size + 3 * h * h
    assert m.vocab_size == t.vocab_size  # no draft vocabulary given: the target's (conservative)
    # one MLA layer's latent cache per token: (512 + 64) elements × 2 B, a 61st of the target's
    assert kv_bytes_per_seq(head, 1000) == pytest.approx(kv_bytes_per_seq(kimi, 1000) / t.n_layers, rel=1e-6)
    llama = Scenario.build("llama-3.1-8b", "h100_sxm")
    g = draft_scenario(llama, "eagle3")
    assert g is not None and (g.model.attention_kind, g.model.n_layers) == ("gqa", 1)
    assert draft_scenario(llama, "ngram") is None


def test_an_eagle_head_given_by_its_own_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`eagle3:HEAD_CONFIG`: the head's own config.json (synthetic here, shaped like a LlamaForCausalLMEagle3
    checkpoint: one layer, a narrower MLP than the target) is priced as written, plus the 3h→h fusion GEMM."""
    import json

    from servescope.perfmodel import Scenario
    from servescope.perfmodel.speculative import draft_scenario
    from servescope.planner import SpecConfig, parse_acceptance, plan, spec_from_options

    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
           "hidden_size": 4096, "intermediate_size": 7168, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 8192}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    sc = Scenario.build("llama-3.1-8b", "h100_sxm")
    head = draft_scenario(sc, "eagle3", str(path))
    assert head is not None and head.model.n_layers == 1 and head.quant.dense_mlp.name == "bf16"
    assert head.model.params.dense_mlp == pytest.approx(3 * 4096 * 7168 + 3 * 4096 * 4096)
    spec = spec_from_options(f"eagle3:{path}", 3, None, 0.7)
    assert spec == SpecConfig("eagle3", 3, parse_acceptance(rate=0.7, k=3), str(path))
    t = plan(sc, concurrency=1, spec=spec).track("speculative_decoding")
    assert t.applicable and str(path) in t.validate


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 256), k=st.integers(1, 8), al=st.floats(1.0, 6.0))
def test_iteration_properties(batch: int, k: int, al: float) -> None:
    """On a real MoE scenario: verifying k+1 tokens per sequence never costs less than a plain step, every part
    of the iteration is non-negative, the gain is base·AL / iteration and never exceeds AL · base / verify."""
    from servescope.perfmodel.speculative import SpecShape, spec_gain

    g = spec_gain(_QWEN_MOE, SpecShape("eagle3", k), al, batch, 1024.0)
    it = g.iteration
    assert min(it.terms_s().values()) >= 0.0
    assert it.verify_s >= g.base_step_s * (1 - 1e-9)
    assert g.gain == pytest.approx(g.base_step_s * al / it.total_s)
    assert g.gain <= al * g.base_step_s / it.verify_s + 1e-9


def test_a_malformed_pairs_file_names_the_file_and_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from servescope.errors import BadConfig

    src = (DATA / "pairs_ledger.csv").read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "pairs.csv"
    bad.write_text("\n".join([src[0], src[1].replace(",1.81,", ",lots,")]) + "\n", encoding="utf-8")
    with pytest.raises(BadConfig, match=r"pairs\.csv: line 2") as err:
        load_pairs(bad)
    assert "\n" not in str(err.value)
    bad.write_text("\n".join([src[0], src[2]]) + "\n", encoding="utf-8")  # a ratio row without its anchor
    with pytest.raises(BadConfig, match="relative_to 'e3_sgl_bs2' is not a row id"):
        evaluate(load_pairs(bad))


def test_the_planner_prices_speculation_like_the_table() -> None:
    """At concurrency 1 (no other requests' prefills) the plan's speculative gain is perfmodel.speculative's
    spec_gain at the planner's context (isl + osl/2), with the shipped host costs; its range is the spec-pairs
    out-of-fold error around the gain."""
    from servescope.perfmodel.speculative import SpecShape, spec_error, spec_gain
    from servescope.planner import SpecConfig, plan

    sc = Scenario.build("llama-3.1-8b", "h100_sxm", isl=512, osl=256)
    acc = (0.7, 0.5, 0.3)
    t = plan(sc, concurrency=1, spec=SpecConfig("eagle3", k=3, acceptance=acc)).track("speculative_decoding")
    g = spec_gain(sc, SpecShape("eagle3", 3), 1.0 + sum(acc), 1, sc.isl + sc.osl / 2.0)
    assert t.gain == pytest.approx(g.gain, rel=1e-9)
    err = spec_error()
    assert (t.gain_low, t.gain_high) == pytest.approx((g.gain / err.q90, g.gain / err.q10), rel=1e-9)
    assert "published with/without pairs" in t.details["range"]


def test_the_fit_recovers_host_costs_that_generated_the_gains() -> None:
    """Synthetic rows whose 'measured' gains are the model's under known host costs (per sequence 120 µs, per
    drafter forward 0.6 ms): the fit returns those costs (to its grid's resolution) and every row within 1 %."""
    from servescope.perfmodel.speculative import HostCosts
    from servescope.validation.spec_fit import fit_host
    from servescope.validation.spec_pairs import PairTerms, SpecPair, Terms, predict

    truth = HostCosts(120e-6, 0.6e-3)
    base = PAIRS[0]
    rows: list[SpecPair] = []
    typed: Terms = {}
    for i, (b, f) in enumerate([(1, 3), (1, 8), (8, 3), (32, 3), (64, 4), (16, 21)]):
        t = PairTerms(base_s=0.008 + 0.00005 * b, iteration_s=0.011 + 0.0001 * b, seqs=b, forwards=f, al=2.5)
        row = replace(base, id=f"syn{i}", kind="gain", relative_to="", al=2.5, measured=t.gain(truth),
                      source=f"S{i % 3} synthetic")
        rows.append(row)
        typed[row.id] = (t, None)
    got = fit_host(rows, rows, typed)
    assert got.per_seq_s == pytest.approx(truth.per_seq_s, rel=0.05)
    assert got.per_forward_s == pytest.approx(truth.per_forward_s, rel=0.05)
    by_id = {r.id: r for r in rows}
    assert all(abs(predict(r, typed, by_id, got) / r.measured - 1) < 0.01 for r in rows)
