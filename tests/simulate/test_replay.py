"""`simulate --replay`: measured requests replayed with their own send times and lengths (issue 17 part 4).

Checks against independent computations: a replay of requests all sent at t = 0 under a client cap is the closed
loop of the same lengths; a Poisson schedule replayed keeps every request's send time; the measured latencies of a
detailed vLLM result (FORMAT.md keys: start_times, input_lens, output_lens, ttfts and itls in seconds) are the
benchmark's own definitions, recomputed here with plain Python."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.perfmodel import Scenario
from servescope.simulate import engine_for, replay_workload, simulate, simulate_workload
from servescope.validation.benchio import read_requests

SCENARIO = ["--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "1"]


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(model="llama-3.1-8b", gpu="h100", tp=1)


def test_all_at_once_under_a_cap_is_the_closed_loop(sc: Scenario) -> None:
    rng = np.random.default_rng(3)
    isl, osl = rng.integers(100, 2000, 64), rng.integers(20, 400, 64)
    closed = simulate(sc, "closed", 16, 64, lengths=(isl, osl), engine=engine_for(sc))
    replay = simulate_workload(sc, replay_workload(np.zeros(64), isl, osl, 16), engine_for(sc))
    assert replay.ttft == closed.ttft and replay.tpot == closed.tpot and replay.e2e == closed.e2e
    assert replay.duration_s == closed.duration_s and replay.settings["arrival"] == "replay"


def _detailed(tmp_path: Path, n: int = 1000, rate: float = 4.0) -> tuple[Path, dict[str, list[object]]]:
    rng = np.random.default_rng(7)
    start = np.cumsum(rng.exponential(1 / rate, n)) + 1.7e9  # epoch seconds, as the benchmark records them
    isl, osl = rng.integers(50, 1500, n), rng.integers(2, 300, n)
    ttfts = rng.uniform(0.02, 0.4, n)
    itls = [list(rng.uniform(0.005, 0.02, int(o) - 1)) for o in osl]
    doc = {"date": "20261201-120000", "backend": "vllm", "completed": n, "start_times": start.tolist(),
           "input_lens": isl.tolist(), "output_lens": osl.tolist(), "ttfts": ttfts.tolist(), "itls": itls}
    path = tmp_path / "vllm-detailed.json"
    path.write_text(json.dumps(doc))
    return path, doc  # type: ignore[return-value]


def test_detailed_vllm_result_measured_latencies(tmp_path: Path) -> None:
    path, doc = _detailed(tmp_path, n=50)
    req = read_requests(path)
    ttft = [float(x) for x in doc["ttfts"]]
    e2e = [t + sum(g) for t, g in zip(ttft, doc["itls"], strict=True)]  # type: ignore[arg-type]
    tpot = [sum(g) / (o - 1) for g, o in zip(doc["itls"], doc["output_lens"], strict=True)]  # type: ignore[arg-type, operator]
    assert req.measured["ttft_s"].tolist() == pytest.approx(ttft)
    assert req.measured["e2e_s"].tolist() == pytest.approx(e2e)
    assert req.measured["tpot_s"].tolist() == pytest.approx(tpot)
    assert req.send_s.tolist() == doc["start_times"] and req.isl.tolist() == doc["input_lens"]


def test_replay_keeps_every_send_time(sc: Scenario, tmp_path: Path) -> None:
    path, doc = _detailed(tmp_path, n=200)
    req = read_requests(path)
    wl = replay_workload(req.send_s, req.isl, req.osl)
    start = sorted(float(s) for s in doc["start_times"])  # type: ignore[union-attr]
    assert wl.sched_s.tolist() == pytest.approx([s - start[0] for s in start], abs=1e-6)
    assert wl.max_in_flight is None


def test_cli_replay_document_and_speed(tmp_path: Path) -> None:
    path, doc = _detailed(tmp_path, n=1000)
    t0 = time.perf_counter()
    result = CliRunner().invoke(main, ["simulate", *SCENARIO, "--replay", str(path), "--json"])
    seconds = time.perf_counter() - t0
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    rep = out["replay"]
    assert out["requests"] == rep["requests"] == 1000 and out["settings"]["arrival"] == "replay"
    ttft_ms = [1e3 * float(x) for x in doc["ttfts"]]  # type: ignore[union-attr]
    assert rep["measured"]["ttft_ms"]["mean"] == pytest.approx(statistics.fmean(ttft_ms))
    assert rep["measured"]["ttft_ms"]["p50"] == pytest.approx(statistics.median(ttft_ms))
    sim = out["ttft_ms"]["mean"]
    assert rep["error"]["ttft_mean"] == pytest.approx((sim - statistics.fmean(ttft_ms)) / statistics.fmean(ttft_ms))
    assert seconds < 10  # issue 17 asks <= 1 s on one core for the replay itself; bench/RESULTS.md has the timing


def test_requests_csv_and_bad_files(tmp_path: Path) -> None:
    f = tmp_path / "requests.csv"
    f.write_text("arrival_s,input_len,output_len,ttft_s\n0.0,100,20,0.05\n0.5,200,10,\n")
    req = read_requests(f)
    assert req.isl.tolist() == [100, 200] and np.isnan(req.measured["ttft_s"][1])
    bad = tmp_path / "bad.csv"
    bad.write_text("time,in,out\n0,1,1\n")
    result = CliRunner().invoke(main, ["simulate", *SCENARIO, "--replay", str(bad)])
    assert result.exit_code == 1 and "missing columns arrival_s, input_len, output_len" in result.output
    assert len(result.output.strip().splitlines()) == 1
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"date": "x", "completed": 3}))
    result = CliRunner().invoke(main, ["simulate", *SCENARIO, "--replay", str(summary)])
    assert result.exit_code == 1 and "--save-detailed" in result.output
