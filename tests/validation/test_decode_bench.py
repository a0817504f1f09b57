"""Decode-only benchmark files as `validate` rows (validation.decode_bench): `vllm bench latency --output-json`
(vllm-project/vllm vllm/benchmarks/latency.py) and `sglang.bench_one_batch` result lines (sgl-project/sglang
python/sglang/bench_one_batch.py). Samples written from those formats: tests/data/README.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.perfmodel import Scenario, predict, prefill_step
from servescope.validation.decode_bench import Lengths, read_decode_bench
from servescope.validation.decode_only import BATCH, STEP, DecodeRowError, Deployment, price

DATA = Path(__file__).parents[1] / "data" / "validation"
VLLM = DATA / "vllm_bench_latency.json"
SGLANG = DATA / "sglang_bench_one_batch.jsonl"
LLAMA, H100 = "meta-llama/Llama-3.1-8B", "h100_sxm"
DEP_VLLM = Deployment(LLAMA, H100, "vllm", "0.11.0")
DEP_SGLANG = Deployment(LLAMA, H100, "sglang")
DEPLOY_ARGS = ["--model", LLAMA, "--gpu", H100]


def test_vllm_latency_file_is_one_batch_row_with_the_lengths_given() -> None:
    raw = json.loads(VLLM.read_text(encoding="utf-8"))
    rows, skipped = read_decode_bench(VLLM, DEP_VLLM, Lengths(8, 32, 128))
    assert not skipped and len(rows) == 1
    r = rows[0]
    assert r.measure == BATCH and r.concurrency == 8 and r.isl == 32 and r.osl == 128
    assert r.context == 32 + 128 // 2  # the mean context of its decode steps
    assert r.tpot_ms == pytest.approx(raw["avg_latency"] * 1e3 / 128)
    assert r.source == VLLM.name


def test_vllm_batch_row_is_priced_as_one_prefill_plus_its_decode_steps() -> None:
    """(t_pf + (osl − 1) · decode-only TPOT) / osl, each part through the public perfmodel API (Llama-3.1-8B has
    no MLA or linear-attention layers: their per-layer prefill terms are 0)."""
    rows, _ = read_decode_bench(VLLM, DEP_VLLM, Lengths(8, 32, 128))
    res = price(rows).rows[0]
    sc = Scenario.build(model=LLAMA, gpu=H100, isl=96, osl=128, engine_version="0.11.0",
                        kv_quant="bf16").with_(decode_only=True)
    e = sc.efficiency
    t_pf = prefill_step(sc, 8 * 32, 8).step_time_s / e.prefill_eff + e.prefill_overhead_s
    decode = predict(sc, [8])[0].tpot_s
    assert res.pred_tpot_ms == pytest.approx((t_pf + 127 * decode) / 128 * 1e3, rel=1e-9)
    assert res.pred_tpot_ms > decode * 1e3  # the prefill's share is in it


def test_vllm_latency_file_without_lengths_is_refused() -> None:
    with pytest.raises(DecodeRowError, match="--batch-size, --input-len and --output-len"):
        read_decode_bench(VLLM, DEP_VLLM)


def test_sglang_lines_are_step_rows_and_a_line_without_decode_is_skipped() -> None:
    lines = [json.loads(x) for x in SGLANG.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows, skipped = read_decode_bench(SGLANG, DEP_SGLANG)
    with_decode = [x for x in lines if "median_decode_latency" in x]
    assert len(rows) == len(with_decode) == 3 and len(skipped) == 1
    assert skipped[0][0] == f"{SGLANG.name}:4" and "output_len 1" in skipped[0][1]
    for r, x in zip(rows, with_decode, strict=True):
        assert r.measure == STEP and r.concurrency == x["batch_size"]
        assert r.tpot_ms == pytest.approx(x["median_decode_latency"] * 1e3)
        assert r.context == x["input_len"] + x["output_len"] // 2  # the median step's context


def test_a_file_of_neither_format_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "serve.json"
    p.write_text(json.dumps({"completed": 10, "duration": 3.0}), encoding="utf-8")
    with pytest.raises(DecodeRowError, match="neither a `vllm bench latency"):
        read_decode_bench(p, DEP_VLLM)


def test_cli_reports_the_bench_rows_as_the_decode_only_slice() -> None:
    res = CliRunner().invoke(main, ["validate", "--decode-bench", str(SGLANG), *DEPLOY_ARGS, "--backend", "sglang",
                                    "--decode-bench", str(VLLM), "--batch-size", "8", "--input-len", "32",
                                    "--output-len", "128", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)["decode_only"]
    assert d["n_rows"] == 4 and len(d["skipped"]) == 1
    assert set(d["by_source"]) == {SGLANG.name, VLLM.name}
    assert {r["measure"] for r in d["rows"]} == {"step", "batch"}


@pytest.mark.parametrize(("args", "words"), [
    (["--decode-bench", str(VLLM), *DEPLOY_ARGS], "--batch-size"),
    (["--decode-bench", str(SGLANG)], "give --model and --gpu"),
    (["--decode-bench", "missing.jsonl", *DEPLOY_ARGS], "missing.jsonl: no such file"),
    ([], "give a CSV"),
])
def test_cli_bad_bench_input_is_one_line(args: list[str], words: str) -> None:
    res = CliRunner().invoke(main, ["validate", *args])
    assert res.exit_code == 1, res.output
    assert res.stderr.count("\n") == 1 and words in res.stderr and "Traceback" not in res.output
