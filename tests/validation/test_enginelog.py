"""Engine logs (issue 17 part 5): the lines vLLM and SGLang print, as their format strings write them
(tests/data/engine_logs/PROVENANCE.md), read into KV capacity and acceptance, and used by simulate and plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.validation.enginelog import parse_engine_log, read_engine_log

LOGS = Path(__file__).parents[1] / "data" / "engine_logs"
VLLM, SGLANG = LOGS / "vllm_kimi_k25_tp8.log", LOGS / "sglang_deepseek_mtp.log"
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]


def test_vllm_kv_capacity_concurrency_and_acceptance() -> None:
    log = read_engine_log(VLLM)
    assert log.engine == "vllm" and log.kv_cache_tokens == 449_600 and log.max_model_len == 262_144
    assert log.max_concurrency == pytest.approx(1.72) and not log.warnings  # two workers agree
    assert log.acceptance == pytest.approx((0.645, 0.393, 0.240))
    # pooled over the two intervals weighted by drafted tokens (1200 and 2400), from the printed lengths
    assert log.mean_acceptance_length == pytest.approx((2.28 * 1200 + 2.28 * 2400) / 3600)


def test_pooling_weights_intervals_by_drafted_tokens() -> None:
    line = ("SpecDecoding metrics: Mean acceptance length: {m}, Accepted throughput: 1.00 tokens/s, Drafted "
            "throughput: 1.00 tokens/s, Accepted: 1 tokens, Drafted: {d} tokens, Per-position acceptance rate: {r}, "
            "Avg Draft acceptance rate: 1.0%")
    text = "\n".join([line.format(m="2.00", d=100, r="0.600, 0.400"), line.format(m="3.00", d=300, r="0.800, 0.600")])
    log = parse_engine_log(text)
    assert log.acceptance == pytest.approx(((0.6 * 100 + 0.8 * 300) / 400, (0.4 * 100 + 0.6 * 300) / 400))
    assert log.mean_acceptance_length == pytest.approx((2.0 * 100 + 3.0 * 300) / 400)


def test_sglang_pool_and_accept_length() -> None:
    log = read_engine_log(SGLANG)
    assert log.engine == "sglang" and log.kv_cache_tokens == 1_183_488 and log.max_running_requests == 1024
    assert log.max_model_len == 163_840 and log.mean_acceptance_length == pytest.approx(2.37)


def test_disagreeing_workers_and_unrecognised_logs_warn() -> None:
    two = "GPU KV cache size: 1,000 tokens\nGPU KV cache size: 900 tokens\n"
    log = parse_engine_log(two, "x.log")
    assert log.kv_cache_tokens == 900 and "differs between lines" in log.warnings[0]
    nothing = parse_engine_log("INFO hello\n", "y.log")
    assert not nothing.found and "no vLLM or SGLang" in nothing.warnings[0]


def test_simulate_takes_the_logged_kv_capacity() -> None:
    args = ["simulate", *KIMI, "--concurrency", "8", "--num-prompts", "16", "--json"]
    logged = CliRunner().invoke(main, [*args, "--engine-log", str(VLLM)])
    typed = CliRunner().invoke(main, [*args, "--kv-cache-tokens", "449600"])
    assert logged.exit_code == 0, logged.output
    assert json.loads(logged.stdout)["kv_capacity_tokens"] == 449_600
    assert json.loads(logged.stdout) == json.loads(typed.stdout)


def test_plan_prices_speculation_with_the_logged_acceptance() -> None:
    # the box runs an FP8 KV cache (its 449,600 logged tokens do not fit in BF16 beside the weights)
    logged = CliRunner().invoke(main, ["plan", *KIMI, "--kv-quant", "fp8", "--json", "--engine-log", str(VLLM)])
    typed = CliRunner().invoke(main, ["plan", *KIMI, "--kv-quant", "fp8", "--json", "--acceptance", "0.645,0.393,0.24",
                                      "--engine-log", str(VLLM)])
    assert logged.exit_code == 0, logged.output
    assert json.loads(logged.stdout) == json.loads(typed.stdout)
