"""`servescope model`, `specs`, `plan` as a user meets them: JSON contracts and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from independent import DATA
from servescope.cli import main

B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servescope", *args], capture_output=True, text=True, timeout=120)


def test_model_json_contract() -> None:
    result = CliRunner().invoke(main, ["model", *KIMI, "--concurrency", "1,16,64,256", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "servescope.model/1"
    assert [p["concurrency"] for p in doc["points"]] == [1, 16, 64, 256]
    for p in doc["points"]:
        assert set(p["terms_ms"]) == {"weights", "kv", "compute", "communication", "overhead", "indexer", "recurrent"}
        assert sum(p["terms_ms"].values()) == pytest.approx(p["tpot_ms"], rel=1e-9)
    ar = doc["points"][0]["collectives"]["all_reduce"]
    assert 120 <= ar["calls_per_step"] <= 126  # 2 per layer × 61 layers (+ the embedding's)


def test_plan_json_contract_uncalibrated() -> None:
    result = CliRunner().invoke(main, ["plan", *KIMI, "--forbid", "quantization", "--target", "3ms", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "servescope.plan/1" and doc["calibrated"] is False
    assert {t["kind"] for t in doc["tracks"]} >= {"speculative_decoding", "custom_allreduce", "expert_parallel"}
    assert doc["target"]["reachable"] is False


def test_plan_calibrated_on_trace() -> None:
    result = CliRunner().invoke(main, ["plan", str(B200), "--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8",
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["calibrated"] is True


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["model", "--model", "no-such-model", "--gpu", "h100_sxm"], "no-such-model"),
        (["model", "--model", "llama-3.1-8b", "--gpu", "h999"], "h999"),
        (["model", "--model", "llama-3.1-70b", "--gpu", "h100_sxm", "--tp", "3"], "tp=3"),
        (["plan", *KIMI, "--forbid", "quantization,teleportation"], "teleportation"),
        (["plan", *KIMI, "--target", "1000tok/s", "--objective", "tpot"], "1000tok/s"),  # a rate implies throughput
        (["plan", str(B200), "--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "4"], "world size"),
        (["specs", "show", "nothing-like-this"], "nothing-like-this"),
    ],
)
def test_bad_input_is_one_line(args: list[str], needle: str) -> None:
    result = _run(*args)
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_config_json(tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096, "num_hidden_layers": ')
    result = _run("model", "--model", str(bad), "--gpu", "h100_sxm")
    assert result.returncode == 1 and "config.json" in result.stderr and "Traceback" not in result.stderr
