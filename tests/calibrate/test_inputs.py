"""`--measured` values read into figures (calibrate.inputs): typed figures and benchmark result files, a vLLM
file carrying `dataset_name` read as vLLM, a closed loop at its client cap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servescope.calibrate.inputs import read_measured
from servescope.errors import MeasurementError, ScenarioError


def _vllm(tmp_path: Path) -> Path:
    d = {"date": "20250101-120000", "endpoint_type": "openai", "dataset_name": "random", "num_prompts": 64,
         "request_rate": "inf", "max_concurrency": 16, "duration": 40.0, "completed": 64,
         "total_input_tokens": 64 * 1024, "total_output_tokens": 64 * 128, "request_throughput": 1.6,
         "output_throughput": 204.8, "mean_ttft_ms": 80.0, "mean_tpot_ms": 11.5, "mean_itl_ms": 11.4}
    p = tmp_path / "vllm-infqps-concurrency16.json"
    p.write_text(json.dumps(d))
    return p


def test_a_result_file_and_typed_figures_in_the_order_given(tmp_path: Path) -> None:
    m = read_measured(["tpot=12.1ms@c1", str(_vllm(tmp_path))])
    assert [f.metric for f in m.figures] == ["tpot", "tpot", "ttft", "itl", "output", "request_rate"]
    tpot = m.figures[1]
    assert (tpot.value_si, tpot.concurrency, tpot.isl, tpot.osl) == (pytest.approx(11.5e-3), 16, 1024, 128)
    assert "(vllm, rate inf, max concurrency 16, 64 requests)" in tpot.source and m.figures[0].source == ""
    assert m.figures[4].value_si == 204.8 and not m.notes  # a closed loop at its cap: nothing to say


def test_files_that_cannot_calibrate_say_why(tmp_path: Path) -> None:
    missing = tmp_path / "m.json"
    missing.write_text(json.dumps({"date": "x", "completed": 3}))
    with pytest.raises(ScenarioError, match="missing keys duration, total_input_tokens, total_output_tokens"):
        read_measured([str(missing)])
    burst = tmp_path / "b.json"
    burst.write_text(json.dumps({"date": "x", "request_rate": "inf", "duration": 10.0, "completed": 5,
                                 "total_input_tokens": 50, "total_output_tokens": 50, "mean_tpot_ms": 9.0}))
    with pytest.raises(MeasurementError, match="no client cap and no request throughput × mean E2E"):
        read_measured([str(burst)])


# --- result files checked against the scenario like traces (issue 26.6) ----------------------------------------

def _result(tmp_path: Path, **keys: object) -> Path:
    d = json.loads(_vllm(tmp_path).read_text()) | keys
    p = tmp_path / "result.json"
    p.write_text(json.dumps(d))
    return p


KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8"]


def _cli(args: list[str]) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from servescope.cli import main

    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def test_identity_of_a_result_file(tmp_path: Path) -> None:
    from servescope.calibrate.inputs import identity_problems
    from servescope.perfmodel.scenario import Scenario

    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8)
    path = _result(tmp_path, model_id="meta-llama/Llama-3.1-70B-Instruct", backend="sglang",
                   tensor_parallel_size=4, data_parallel_size=1)
    m = read_measured([str(path)])
    problems = identity_problems(m.identities, sc)
    assert len(problems) == 3
    assert problems[0].startswith(f"{path}:1: model_id 'meta-llama/Llama-3.1-70B-Instruct' is ")
    assert "not the scenario's model kimi-k2.5" in problems[0]
    assert "backend 'sglang' is sglang, not the scenario's backend vllm" in problems[1]
    assert "tensor_parallel_size=4 × data_parallel_size=1 say 4 GPUs, the scenario has 8" in problems[2]
    # the same model under its HF id, the client backend `openai` (no engine) and a name servescope does not know
    fine = _result(tmp_path, model_id="moonshotai/Kimi-K2.5", backend="openai", tp=8)
    assert identity_problems(read_measured([str(fine)]).identities, sc) == []
    alias = _result(tmp_path, model_id="my-served-model", backend="vllm")
    assert identity_problems(read_measured([str(alias)]).identities, sc) == []


def test_a_result_file_of_another_model_is_refused_unless_forced(tmp_path: Path) -> None:
    """The issue: a Llama-3.1-70B result file calibrated a Kimi scenario silently."""
    path = _result(tmp_path, model_id="meta-llama/Llama-3.1-70B-Instruct")
    for command in (["model"], ["plan"], ["simulate", "--num-prompts", "8"]):
        code, _, err = _cli([*command, *KIMI, "--measured", str(path)])
        assert code == 1, (command, err)
        line = err.strip()
        assert "\n" not in line and str(path) in line and "model_id 'meta-llama/Llama-3.1-70B-Instruct'" in line
        assert "kimi-k2.5" in line and "--force" in line
    code, out, err = _cli(["model", *KIMI, "--measured", str(path), "--force"])
    assert code == 0 and out
    assert "used anyway (--force)" in err and "Llama-3.1-70B" in err
