"""`--metrics FILE` and a scrape given to `--measured` (issue 29.2): the engine's measured boundaries beside the
simulated ones, and typed figures from a scrape. The simulated boundaries are checked by their identity
(TTFT = queue + set-up + prefill per request), the measured ones against the hand-worked means of the sample scrape
(tests/data/metrics/vllm_v1_c16.prom: TTFT 6.0 s / 100, ITL 180 s / 10,000, 16 running)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.cli._measured import metrics_figures
from servescope.errors import MeasurementError
from servescope.perfmodel import Scenario
from servescope.simulate import engine_for, simulate
from servescope.simulate.stepcost import StepCost

DATA = Path(__file__).parent.parent / "data" / "metrics"
SCENARIO = ["--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "1", "--isl", "1024", "--osl", "101"]


def test_simulated_boundaries_add_up_to_ttft() -> None:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100", tp=1, isl=1024, osl=101)
    res = simulate(sc, "closed", 32, 200)
    s = res.samples
    setup = StepCost(sc, engine_for(sc), 8, 8).setup_s
    np.testing.assert_allclose(s["queue"] + setup + s["prefill"], s["ttft"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s["ttft"] + s["decode"], s["e2e"], rtol=1e-9, atol=1e-12)
    assert res.boundaries["queue"].p99_s > 0  # 32 in flight on one GPU: some requests wait for a step


def test_simulate_metrics_json_carries_both_sides() -> None:
    r = CliRunner().invoke(main, ["simulate", *SCENARIO, "--num-prompts", "64", "--metrics",
                                  str(DATA / "vllm_v1_c16.prom"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    em = doc["engine_metrics"]
    assert doc["settings"]["concurrency"] == 16  # from vllm:num_requests_running
    rows = {row["boundary"]: row for row in em["boundaries"]}
    assert rows["ttft"]["measured_ms"]["mean"] == pytest.approx(60.0)
    assert rows["itl"]["measured_ms"]["mean"] == pytest.approx(18.0)
    assert rows["ttft"]["simulated_ms"]["mean"] == pytest.approx(doc["ttft_ms"]["mean"])
    sim, meas = rows["e2e"]["simulated_ms"]["mean"], rows["e2e"]["measured_ms"]["mean"]
    assert rows["e2e"]["error_pct"] == pytest.approx((sim - meas) / meas * 100)
    assert em["gauges"]["prefix_hit_rate"] == pytest.approx(0.25)


def test_measured_scrape_becomes_typed_figures() -> None:
    figs = {f.metric: f for f in metrics_figures(str(DATA / "vllm_v1_c16.prom"))}
    assert figs["tpot"].value_si == pytest.approx(180.0 / 10000) and figs["tpot"].concurrency == 16
    assert figs["ttft"].value_si == pytest.approx(6.0 / 100)
    assert figs["tpot"].isl == 1024 and figs["tpot"].osl == 101
    assert "vllm:inter_token_latency_seconds" in figs["tpot"].source


def test_scrape_without_running_requests_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "idle.prom"
    p.write_text((DATA / "vllm_v1_c16.prom").read_text().replace(
        'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 16.0',
        'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0'))
    with pytest.raises(MeasurementError, match="no running requests at the scrape"):
        metrics_figures(str(p))


def test_bad_scrape_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.prom"
    p.write_text('vllm:inter_token_latency_seconds_bucket{le="0.1"} 9\n'
                 'vllm:inter_token_latency_seconds_bucket{le="+Inf"} 4\n')
    r = CliRunner().invoke(main, ["simulate", *SCENARIO, "--concurrency", "4", "--metrics", str(p)])
    assert r.exit_code != 0
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "vllm:inter_token_latency_seconds" in lines[0] and "Traceback" not in r.output
