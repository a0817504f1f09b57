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
