"""Grouped cross-validation (perfmodel.crossval): held-out rows are predicted by a fit that never saw them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from servescope.perfmodel.crossval import cross_validate
from servescope.perfmodel.efficiency import default_efficiency
from servescope.perfmodel.fit import FitData, fit, fit_data, predict_data
from servescope.perfmodel.validate import parse_row

DEV = Path(__file__).parent / "data" / "validation" / "measured_serving_dev.csv"
MODELS = ("meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B", "openai/gpt-oss-120b")


@pytest.fixture(scope="module")
def data() -> FitData:
    """Aggregated H100 vLLM rows of three models (a small real slice of the dev CSV)."""
    with DEV.open(newline="", encoding="utf-8") as f:
        picked = [r for r in csv.DictReader(f) if r["model_path"] in MODELS and r["system"] == "h100_sxm"
                  and r["backend"] == "vllm" and r["mode"] == "agg"]
    cache: dict = {}
    return fit_data([parse_row(r, cache) for r in picked])


def test_each_model_is_predicted_by_a_fit_without_it(data: FitData) -> None:
    start = default_efficiency("default", "vllm")
    cv = cross_validate(data, start, groupings={"leave_one_model_out": "model"}, workers=1, iterations=3)
    s = cv.summaries["leave_one_model_out"]
    assert s.folds == len(set(data.labels["model"])) == 3 and s.rows == len(data.tpot_s)
    held = data.labels["model"] == MODELS[0]
    ref = fit(data.subset(~held), start, iterations=3)  # independent refit on the other two models
    tp, tf = predict_data(data.subset(held), ref.efficiency)
    assert np.allclose(cv.pred_tpot_s["leave_one_model_out"][held], tp)
    assert np.allclose(cv.pred_ttft_s["leave_one_model_out"][held], tf)
    in_sample, _ = predict_data(data.subset(held), fit(data, start, iterations=3).efficiency)
    assert not np.allclose(tp, in_sample)  # the held-out model's rows did move the fit
    errs = [float(p) / float(m) - 1.0 for p, m in zip(cv.pred_tpot_s["leave_one_model_out"], data.tpot_s, strict=True)]
    assert s.tpot_bias == pytest.approx(sum(errs) / len(errs))
    assert s.tpot_mape == pytest.approx(sum(abs(e) for e in errs) / len(errs))


def test_one_group_only_reports_in_sample_with_a_warning(data: FitData) -> None:
    start = default_efficiency("default", "vllm")
    cv = cross_validate(data, start, groupings={"leave_one_system_out": "system"}, workers=1)
    s = cv.summaries["leave_one_system_out"]
    assert s.folds == 0 and "only one system (h100_sxm)" in s.warning and "in-sample" in s.warning
    tp, _ = predict_data(data, start)
    assert np.allclose(cv.pred_tpot_s["leave_one_system_out"], tp)
