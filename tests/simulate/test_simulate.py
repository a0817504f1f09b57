"""perfmodel.simulate: engine defaults, workload, bad input, the step-cost adapter, and `servescope simulate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import BadConfig, ScenarioError
from servescope.perfmodel import Scenario, decode_step
from servescope.perfmodel.step import step_arrays
from servescope.simulate import (
    Arrival,
    engine_for,
    scheduler_config,
    simulate,
)
from servescope.simulate.stepcost import StepCost
from servescope.specs.engines import engine
from servescope.validation.benchio import read_lengths

SMALL = dict(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=256, osl=64)
CLI_SMALL = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--isl", "256", "--osl", "64"]


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(**SMALL)


def test_scheduler_config_has_a_source_per_knob() -> None:
    h100 = 80e9
    for backend in ("vllm", "sglang", "trtllm"):
        cfg = scheduler_config(engine(backend, "", h100))
        knobs = {"max_num_seqs", "max_num_batched_tokens", "chunked_prefill", "priority", "admission",
                 "block_size_tokens", "graph_mixed_batches"}
        assert knobs <= set(cfg.sources), backend
        assert all(len(v) > 20 for v in cfg.sources.values())
    assert scheduler_config(engine("sglang", "", h100)).priority == "prefill_first"
    assert scheduler_config(engine("trtllm", "", h100)).admission == "reserve_full"
    sg = scheduler_config(engine("sglang", "", h100))
    assert sg.admission == "reserve_ratio" and sg.reserve_init_ratio > sg.reserve_min_ratio > 0
    with pytest.raises(BadConfig, match="known: vllm, sglang, trtllm"):
        engine("tgi")


def test_arrival_parse() -> None:
    assert Arrival.parse("poisson:2.5").rate_per_s == 2.5
    assert Arrival.parse("burst:7").burst == 7
    for bad in ("poisson", "poisson:-1", "burst:0", "closed:3", "uniform"):
        with pytest.raises(ScenarioError, match="expected closed, poisson:RATE"):
            Arrival.parse(bad)


def test_lengths_file(tmp_path: Path) -> None:
    f = tmp_path / "len.csv"
    f.write_text("isl,osl\n100,20\n# comment\n300 40\n")
    isl, osl = read_lengths(f)
    assert isl.tolist() == [100, 300] and osl.tolist() == [20, 40]
    f.write_text("100,20\n5,x\n")
    with pytest.raises(ScenarioError, match=r"len.csv:2: expected two integers"):
        read_lengths(f)


def test_step_model_is_the_sum_the_adapter_assumes(sc: Scenario) -> None:
    """stepcost.py adds gemm + moe + attention + communication + kernels + cpu: that must be the step."""
    for prefill in (False, True):
        a = step_arrays(sc, np.array([1, 8, 64]), np.array([10, 500, 2000]), 1 if not prefill else 256, prefill)
        parts = sum(np.asarray(a[k]) for k in ("gemm", "moe", "attention", "communication", "kernels", "cpu"))
        np.testing.assert_allclose(parts, a["step"], rtol=1e-12)


def test_pure_decode_step_equals_closed_form(sc: Scenario) -> None:
    cost = StepCost(sc, engine_for(sc), 8192, 4096)
    for b, ctx in ((1, 100), (32, 700), (64, 3000)):
        got = cost.step_s(np.full(b, ctx + 1.0), np.zeros(0), np.zeros(0))
        assert got == pytest.approx(decode_step(sc, b, ctx).step_time_s, rel=1e-3)


def test_pure_decode_step_equals_closed_form_on_either_attention_path(sc: Scenario) -> None:
    """The measured decode-attention curve (priced at the step's batch and mean context) and the roofline (a sum
    over sequences) both reproduce the closed form's decode step at one context."""
    from servescope.perfmodel.step import measured_attention

    # on H200 (H100's vLLM decode-attention curve is off by its dev rows' cross-validated error, issue 27)
    sc = Scenario.build(**{**SMALL, "gpu": "h200_sxm"})
    roof = sc.with_(efficiency=sc.efficiency.scaled(op_curves=0.0))
    assert measured_attention(sc) and not measured_attention(roof)
    for s in (sc, roof):
        cost = StepCost(s, engine_for(s), 8192, 4096)
        for b, ctx in ((3, 250), (48, 1900)):
            got = cost.step_s(np.full(b, ctx + 1.0), np.zeros(0), np.zeros(0))
            assert got == pytest.approx(decode_step(s, b, ctx).step_time_s, rel=1e-3)


def test_trtllm_pure_decode_step_equals_closed_form_with_overlapped_cpu(sc: Scenario) -> None:
    """TRT-LLM overlaps scheduling with execution (specs/data/engines/ overlap.enabled): the adapter must hide the same
    CPU time the closed form hides, at every batch (below and above the CPU/GPU crossover)."""
    trt = sc.with_(backend="trtllm")
    cost = StepCost(trt, engine_for(trt), 8192, 4096)
    for b, ctx in ((1, 100), (32, 700), (64, 3000)):
        got = cost.step_s(np.full(b, ctx + 1.0), np.zeros(0), np.zeros(0))
        assert got == pytest.approx(decode_step(trt, b, ctx).step_time_s, rel=1e-3)


def test_mixed_step_costs_more_than_its_decode_part(sc: Scenario) -> None:
    cost = StepCost(sc, engine_for(sc), 8192, 4096)
    dec = cost.step_s(np.full(16, 300.0), np.zeros(0), np.zeros(0))
    mixed = cost.step_s(np.full(16, 300.0), np.array([512]), np.array([0]))
    assert mixed > dec


def test_input_longer_than_context_limit(sc: Scenario) -> None:
    eng = engine_for(sc, max_model_len=200)
    with pytest.raises(ScenarioError, match="256 \\+ 64 tokens exceeds the context limit max_model_len=200"):
        simulate(sc, "burst:2", engine=eng)


def test_no_kv_room_for_one_request(sc: Scenario) -> None:
    with pytest.raises(ScenarioError, match="no KV room for one request: 320 tokens needed"):
        simulate(sc, "burst:2", kv_cache_tokens=160)


def test_queueing_is_reported(sc: Scenario) -> None:
    res = simulate(sc, "closed", concurrency=32, num_prompts=64, engine=engine_for(sc, max_num_seqs=8))
    assert res.queueing.queued > 0 and res.queueing.max_wait_s > 0
    assert any("requests queued in the engine" in w and "longest" in w for w in res.warnings)
    assert max(res.timeline["running"]) <= 8


def test_kv_pressure_preempts_and_still_finishes(sc: Scenario) -> None:
    res = simulate(sc, "burst:40", kv_cache_tokens=2000)
    assert res.queueing.preemptions > 0 and res.requests == 40
    assert max(res.timeline["kv_used_frac"]) <= 1.0


def test_trtllm_reserve_full_never_preempts(sc: Scenario) -> None:
    trt = sc.with_(backend="trtllm")
    res = simulate(trt, "burst:40", kv_cache_tokens=2000)
    assert res.queueing.preemptions == 0
    assert max(res.timeline["running"]) <= 2000 // 320


def test_trtllm_without_chunking_rejects_a_prompt_over_the_budget() -> None:
    trt = Scenario.build(**{**SMALL, "isl": 9000, "backend": "trtllm"})
    with pytest.raises(ScenarioError, match="exceeds max_num_batched_tokens=8192 and chunked prefill is off"):
        simulate(trt, "burst:1")


def test_cli_json_document() -> None:
    r = CliRunner().invoke(main, ["simulate", *CLI_SMALL, "--concurrency", "8", "--num-prompts", "40", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "servescope.simulate/1" and doc["requests"] == 40
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(doc[key]) == {"mean", "p50", "p90", "p99"}
        assert doc[key]["p50"] <= doc[key]["p90"] <= doc[key]["p99"]
    assert doc["output_tok_s"] == pytest.approx(40 * 64 / doc["duration_s"])
    assert {"t_s", "running", "kv_used_frac"} <= set(doc["timeline"])


def test_cli_text_and_bad_input() -> None:
    r = CliRunner().invoke(main, ["simulate", *CLI_SMALL, "--arrival", "burst:20"])
    assert r.exit_code == 0, r.output
    assert "TTFT" in r.output and "output tok/s" in r.output
    r = CliRunner().invoke(main, ["simulate", *CLI_SMALL, "--arrival", "poisson:x"])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "poisson:RATE" in r.output
    r = CliRunner().invoke(main, ["simulate", *CLI_SMALL, "--arrival", "closed"])
    assert r.exit_code == 1 and "closed-loop arrival needs a concurrency" in r.output


def test_model_simulate_adds_percentiles() -> None:
    r = CliRunner().invoke(main, ["model", *CLI_SMALL, "--concurrency", "1,8", "--simulate", "--json"])
    assert r.exit_code == 0, r.output
    pts = json.loads(r.output)["points"]
    for p in pts:
        assert p["ttft_p50_ms"] <= p["ttft_p99_ms"] and p["tpot_p50_ms"] <= p["tpot_p99_ms"]
        assert p["itl_p99_ms"] > 0 and p["simulated"]["requests"] == 200
    # a lone request: simulated TPOT is the decode step over its output, close to the closed form's TPOT
    assert pts[0]["tpot_p50_ms"] == pytest.approx(pts[0]["tpot_ms"], rel=0.05)


def test_sweep_front() -> None:
    from servescope.planner.layouts import layouts
    from servescope.planner.sweep import SweepPoint, pareto

    assert {(x.tp, x.dp) for x in layouts(4, moe=False)} == {(1, 4), (2, 2), (4, 1)}
    assert len(layouts(4, moe=True)) == 6
    lay = layouts(1, False)[0]
    pts = [SweepPoint(lay, c, g, u, 0.0, 0.0, 0.0) for c, g, u in ((1, 10, 100), (2, 20, 50), (3, 15, 40))]
    assert pareto(pts) == [True, True, False]
    r = CliRunner().invoke(main, ["sweep", "--model", "qwen3-30b-a3b", "--gpu", "h100_sxm", "--gpus", "2",
                                  "--concurrency", "1,16,64", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "servescope.sweep/1" and doc["n_gpus"] == 2
    front = [p for p in doc["points"] if p["on_front"]]
    assert front and all(p["tok_s_per_user"] == pytest.approx(1e3 / p["tpot_ms"]) for p in front)
    for p in doc["points"]:  # nothing off the front beats a front point on both axes
        assert p["on_front"] or any(q["tok_s_per_gpu"] >= p["tok_s_per_gpu"]
                                    and q["tok_s_per_user"] >= p["tok_s_per_user"] for q in front)


def test_validate_simulate_rows() -> None:
    from servescope.validation.simulate_rows import simulate_rows

    csv = Path(__file__).parents[1] / "data" / "validation" / "measured_serving_dev.csv"
    res = simulate_rows(csv, stride=600)
    assert 3 <= len(res.rows) <= 10
    for r in res.rows:
        assert r.pred_ttft_ms > 0 and r.pred_tpot_ms > 0 and r.dominant == "simulated"
    r = CliRunner().invoke(main, ["validate", str(csv), "--simulate", "--stride", "600", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["schema"] == "servescope.validate/1"


def test_sglang_reservation_preempts_less_than_plain_on_demand(sc: Scenario) -> None:
    sg = sc.with_(backend="sglang")
    plain = engine_for(sg).with_(admission="on_demand")
    reserved = simulate(sg, "burst:60", kv_cache_tokens=4000)
    greedy = simulate(sg, "burst:60", kv_cache_tokens=4000, engine=plain)
    assert reserved.queueing.preemptions < greedy.queueing.preemptions
