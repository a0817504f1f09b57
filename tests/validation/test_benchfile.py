"""Benchmark result files (SGLang bench_serving JSONL, real; vLLM --save-result JSON, synthetic edge cases) and
`servescope simulate --compare`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.validation.benchfile import BenchFileError, bench_workload
from servescope.validation.benchio import read_bench

DATA = Path(__file__).parents[1] / "data" / "bench_serve"
LLAMA70 = DATA / "datacrunch_h200_sglang_llama_3_3_70b_online_output.jsonl"
DSV2 = DATA / "datacrunch_h200_sglang_deepseek_dp_mla_output.jsonl"


def test_sglang_jsonl_every_line_and_metric() -> None:
    runs = read_bench(LLAMA70)
    lines = [json.loads(x) for x in LLAMA70.read_text().splitlines() if x.strip()]
    assert len(runs) == len(lines) == 7
    for run, d in zip(runs, lines, strict=True):
        assert run.tool == "sglang" and run.completed == d["completed"]
        assert run.request_rate_per_s == d["request_rate"] and run.max_concurrency is None
        assert run.mean_isl == d["total_input_tokens"] / d["completed"]
        assert run.metrics["ttft_ms.p50"] == d["median_ttft_ms"]
        assert run.metrics["itl_ms.p50"] == d["median_itl_ms"]
        assert run.metrics["e2e_ms.mean"] == d["mean_e2e_latency_ms"]
        assert run.metrics["output_tok_s"] == d["output_throughput"]
        assert "tpot_ms.p50" not in run.metrics  # the Dec-2024 schema has no TPOT
    assert runs[0].isl == 1024 and runs[0].range_ratio == 0.0
    assert runs[5].isl is None  # sharegpt: the random-length keys do not describe the prompts


def test_infinite_rate_is_a_burst() -> None:
    (run,) = read_bench(DSV2)
    assert math.isinf(run.request_rate_per_s)
    wl = bench_workload(run)
    assert wl.arrival.kind == "burst" and wl.n == 10000 and wl.max_in_flight is None
    assert (wl.isl == 1).all() and (wl.osl == 512).all()


def test_random_lengths_follow_the_range_ratio() -> None:
    wl = bench_workload(read_bench(LLAMA70)[1])
    assert wl.arrival.kind == "poisson" and wl.n == 600
    assert wl.isl.min() >= 1 and wl.isl.max() <= 1024
    assert abs(float(np.mean(wl.isl)) - 512) < 40  # uniform on [1, 1024]


def _vllm_file(tmp_path: Path, **drop: bool) -> Path:
    d = {"date": "20250101-120000", "endpoint_type": "openai", "num_prompts": 100, "request_rate": "inf",
         "max_concurrency": 16, "duration": 50.0, "completed": 100, "total_input_tokens": 102400,
         "total_output_tokens": 12800, "request_throughput": 2.0, "output_throughput": 256.0,
         "mean_ttft_ms": 120.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 400.0, "mean_tpot_ms": 20.0,
         "median_tpot_ms": 19.0, "p99_tpot_ms": 30.0, "mean_itl_ms": 20.0, "median_itl_ms": 18.0,
         "p99_itl_ms": 60.0, "mean_e2el_ms": 2700.0, "p99_e2el_ms": 3100.0}
    for k in drop:
        d.pop(k)
    f = tmp_path / "vllm.json"
    f.write_text(json.dumps(d))
    return f


def test_vllm_json(tmp_path: Path) -> None:
    (run,) = read_bench(_vllm_file(tmp_path))
    assert run.tool == "vllm" and math.isinf(run.request_rate_per_s) and run.max_concurrency == 16
    assert run.metrics["tpot_ms.p99"] == 30.0 and run.metrics["e2e_ms.p99"] == 3100.0
    wl = bench_workload(run)
    assert wl.arrival.kind == "closed" and wl.max_in_flight == 16 and (wl.isl == 1024).all()


def test_missing_keys_are_named(tmp_path: Path) -> None:
    f = _vllm_file(tmp_path, completed=True, total_output_tokens=True)
    with pytest.raises(BenchFileError, match=r"vllm.json:1: missing keys completed, total_output_tokens"):
        read_bench(f)
    g = tmp_path / "bad.jsonl"
    g.write_text('{"completed": 1}\nnot json\n')
    with pytest.raises(BenchFileError, match=r"bad.jsonl:2: not JSON"):
        read_bench(g)


def test_cli_compare(tmp_path: Path) -> None:
    f = _vllm_file(tmp_path)
    r = CliRunner().invoke(main, ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--compare", str(f),
                                  "--json"])
    assert r.exit_code == 0, r.output
    (run,) = json.loads(r.output)["runs"]
    rows = {x["metric"]: x for x in run["comparison"]}
    assert {"ttft_ms.p99", "tpot_ms.p99", "itl_ms.p99", "e2e_ms.p99", "output_tok_s"} <= set(rows)
    for x in rows.values():
        assert x["error_pct"] == pytest.approx((x["simulated"] - x["measured"]) / x["measured"] * 100)
    assert run["requests"] == 100 and run["settings"]["concurrency"] == 16
    r = CliRunner().invoke(main, ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--compare",
                                  str(_vllm_file(tmp_path, duration=True))])
    assert r.exit_code == 1 and "missing keys duration" in r.output and r.output.count("\n") == 1


def test_sidecar_server_settings(tmp_path: Path) -> None:
    f = _vllm_file(tmp_path)
    side = tmp_path / "vllm.json.server.toml"
    side.write_text("max_num_seqs = 4\nkv_cache_tokens = 50000\n")
    args = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--compare", str(f), "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    (run,) = json.loads(r.output)["runs"]
    assert run["settings"]["engine"]["max_num_seqs"] == 4 and run["kv_capacity_tokens"] == 50000
    assert max(run["timeline"]["running"]) <= 4
    r = CliRunner().invoke(main, [*args, "--max-num-seqs", "8"])  # the command line wins
    assert json.loads(r.output)["runs"][0]["settings"]["engine"]["max_num_seqs"] == 8
    side.write_text("max_num_seq = 4\n")
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "unknown keys max_num_seq" in r.output


def test_a_vllm_file_with_dataset_name_is_still_vllm(tmp_path: Path) -> None:
    """Newer `vllm bench serve` results carry `dataset_name` too (issue 17): the tool is told by the keys only one
    benchmark writes (FORMAT.md), so the E2E key `*_e2el_ms` and `date` win."""
    f = _vllm_file(tmp_path)
    d = json.loads(f.read_text())
    f.write_text(json.dumps({**d, "dataset_name": "random"}))
    (run,) = read_bench(f)
    assert run.tool == "vllm" and run.metrics["e2e_ms.p99"] == 3100.0


def test_the_real_sglang_files_stay_sglang() -> None:
    for path in sorted(DATA.glob("*.jsonl")):
        assert {r.tool for r in read_bench(path)} == {"sglang"}, path.name


def test_compare_uses_each_requests_lengths_when_the_file_has_them(tmp_path: Path) -> None:
    f = _vllm_file(tmp_path)
    d = json.loads(f.read_text())
    ins, outs = [100 + 7 * i for i in range(d["completed"])], [10 + i % 13 for i in range(d["completed"])]
    f.write_text(json.dumps({**d, "input_lens": ins, "output_lens": outs}))
    (run,) = read_bench(f)
    wl = bench_workload(run)
    assert wl.isl.tolist() == ins and wl.osl.tolist() == outs
