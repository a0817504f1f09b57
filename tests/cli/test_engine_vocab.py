"""Engine vocabulary (issue 26.8): --kv-quant takes the engines' --kv-cache-dtype values, --engine-log sizes the KV
pool on `model` and `plan`, `simulate --replay --measured` calibrates at the file's lengths, and --range-ratio
follows a named benchmark's convention (vLLM's accepted)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.cli.simulate_cmd import vllm_lengths
from servescope.errors import UnknownName
from servescope.specs.kv_dtypes import kv_scheme

LLAMA = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm"]


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def _json(*args: str) -> dict:
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("value", "scheme"), [
    ("auto", None), ("fp8", "fp8"), ("fp8_e4m3", "fp8"), ("fp8_e5m2", "fp8"), ("FP8_E4M3", "fp8"),
    ("bfloat16", "bf16"), ("bf16", "bf16"), ("fp4_e2m1", "mxfp4"), ("fp8_ds_mla", "fp8"), (None, None),
])
def test_engine_kv_cache_dtypes(value: str | None, scheme: str | None) -> None:
    assert kv_scheme(value) == scheme


def test_unknown_kv_dtype_names_the_accepted_ones() -> None:
    with pytest.raises(UnknownName, match="fp8_e4m3.*fp4_e2m1"):
        kv_scheme("fp6")
    code, _, err = _run("model", *LLAMA, "--kv-quant", "fp6")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "--kv-quant 'fp6'" in err


def test_kv_quant_engine_words_price_as_their_scheme() -> None:
    fp8 = _json("model", *LLAMA, "--kv-quant", "fp8")
    for word in ("fp8_e4m3", "fp8_e5m2"):
        assert _json("model", *LLAMA, "--kv-quant", word)["points"] == fp8["points"]
    assert _json("model", *LLAMA, "--kv-quant", "auto")["points"] == _json("model", *LLAMA)["points"]


def _vllm_log(tmp_path: Path, tokens: int) -> Path:
    log = tmp_path / "vllm.log"
    log.write_text(f"INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: {tokens:,} tokens\n")
    return log


def test_engine_log_sets_the_kv_pool_on_model_and_plan(tmp_path: Path) -> None:
    tokens = 100_000  # llama-3.1-8b: full attention, KV per token fixed: a 1,536-token request takes 1,536 of them
    log = _vllm_log(tmp_path, tokens)
    doc = _json("model", *LLAMA, "--concurrency", "1", "--engine-log", str(log))
    assert doc["points"][0]["max_concurrency"] == math.floor(tokens / (1024 + 512))
    plan = _json("plan", *LLAMA, "--engine-log", str(log))
    assert plan["memory_limit"]["max_concurrency"] == math.floor(tokens / (1024 + 512))
    assert plan["scenario"]["assumed"]["kv_cache_tokens"] == pytest.approx(tokens, abs=1)
    code, _, err = _run("model", *LLAMA, "--engine-log", str(_vllm_log(tmp_path, 10**9)))
    assert code == 1 and "check --kv-quant" in err and len(err.strip().splitlines()) == 1


def test_replay_with_measured_calibrates_at_the_files_lengths(tmp_path: Path) -> None:
    f = tmp_path / "requests.csv"
    f.write_text("arrival_s,input_len,output_len\n" + "".join(f"{i * 0.1},{300},{100}\n" for i in range(8)))
    args = ["simulate", *LLAMA, "--replay", str(f), "--measured", "tpot=9ms@c4,isl=300,osl=100"]
    code, out, err = _run(*args)
    assert code == 0, err  # at the default ISL 1024 / OSL 512 the figure's lengths would not match
    assert "mean lengths, ISL 300 / OSL 100" in err


def test_vllm_range_ratio_convention() -> None:
    isl, osl = vllm_lengths(20_000, 1000, 200, 0.25, seed=1)
    assert isl.min() >= 750 and isl.max() <= 1250 and abs(isl.mean() - 1000) < 5
    assert osl.min() >= 150 and osl.max() <= 250
    fixed = vllm_lengths(5, 1000, 200, 0.0, seed=1)
    assert np.all(fixed[0] == 1000) and np.all(fixed[1] == 200)
    base = ["simulate", *LLAMA, "--concurrency", "4", "--num-prompts", "40"]
    assert _run(*base, "--range-convention", "vllm", "--range-ratio", "0.5")[0] == 0
    code, _, err = _run(*base, "--range-convention", "vllm", "--range-ratio", "1")
    assert code == 1 and "[0, 1)" in err
    assert _run(*base, "--range-ratio", "0.5")[0] == 0  # SGLang's convention, the default
