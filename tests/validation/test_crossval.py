"""Grouped cross-validation (perfmodel.crossval): held-out rows are predicted by a fit that never saw them."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from servescope.perfmodel.efficiency import default_efficiency, unfitted_start
from servescope.validation.crossval import cross_validate
from servescope.validation.fit import FitData, fit, fit_data, predict_data
from servescope.validation.validate import parse_row

DEV = Path(__file__).parents[1] / "data" / "validation" / "measured_serving_dev.csv"
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
    start = unfitted_start()  # where the shipped fit and every fold start (a fitted start barely moves in 3 steps)
    cv = cross_validate(data, start, groupings={"leave_one_model_out": "model"}, workers=1, iterations=3,
                        fold_start=start)
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


def test_engine_offsets_apply_per_backend_and_only_with_four_models() -> None:
    """[backend.<name>] sections of efficiency.toml (read here with tomllib) override [default] for that engine
    only; a fit on rows of fewer than four models per engine adds no offset."""
    import tomllib

    from servescope.perfmodel.efficiency import global_efficiency
    from servescope.validation.fit import BY_BACKEND_CANDIDATES as BY_BACKEND

    path = Path(__file__).parents[2] / "src" / "servescope" / "specs" / "data" / "efficiency.toml"
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    for name in BY_BACKEND:  # shipped without engine sections today: then every engine gets [default]
        assert getattr(global_efficiency(), name) == pytest.approx(doc["default"][name])
        assert getattr(default_efficiency("hopper", "sglang"), name) == pytest.approx(
            doc.get("backend", {}).get("sglang", doc["default"]).get(name, doc["default"][name]))
        for be, vals in doc.get("backend", {}).items():
            assert getattr(default_efficiency("hopper", be), name) == pytest.approx(vals[name])
    assert len(doc["default"]) + sum(len(v) for v in doc.get("backend", {}).values()) <= 30  # issue 7: <= 30 numbers


def test_no_engine_offset_below_four_models(data: FitData) -> None:
    from servescope.validation.fit import BY_BACKEND_CANDIDATES, override_backends

    assert override_backends(data) == []  # three models on one engine
    res = fit(data, default_efficiency("default", "vllm"), iterations=2, by_backend=BY_BACKEND_CANDIDATES)
    assert res.overrides == {}


def test_folds_start_where_the_shipped_fit_started_not_from_it(data: FitData) -> None:
    """A fold must not begin at a fit that has seen its held-out rows: by default every fold starts from the built-in
    defaults (unfitted_start), whatever `start` is passed for in-sample predictions."""
    from servescope.perfmodel.efficiency import global_efficiency, unfitted_start

    g = {"leave_one_model_out": "model"}
    default = cross_validate(data, global_efficiency(), groupings=g, workers=1, iterations=3)
    explicit = cross_validate(data, default_efficiency("default", "vllm"), groupings=g, workers=1, iterations=3,
                              fold_start=unfitted_start())
    warm = cross_validate(data, global_efficiency(), groupings=g, workers=1, iterations=3,
                          fold_start=global_efficiency())
    assert np.array_equal(default.pred_tpot_s["leave_one_model_out"], explicit.pred_tpot_s["leave_one_model_out"])
    assert not np.allclose(default.pred_tpot_s["leave_one_model_out"], warm.pred_tpot_s["leave_one_model_out"])
