"""The `servescope.validate/1` JSON document of a ValidationResult. Presentation only: rows are copied; the
per-group MAPEs are the same mean of absolute percentage errors as ValidationResult's, over each group's rows."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from servescope.validation.crossval import CrossValidation
from servescope.validation.validate import RowResult, ValidationResult, mape

SCHEMA = "servescope.validate/1"


def _summary(rows: list[RowResult]) -> dict[str, Any]:
    return {"rows": len(rows), "tpot_mape": mape([r.tpot_err for r in rows]),
            "ttft_mape": mape([r.ttft_err for r in rows])}


def _by(rows: list[RowResult], attr: str) -> dict[str, Any]:
    g: dict[str, list[RowResult]] = defaultdict(list)
    for r in rows:
        g[getattr(r, attr)].append(r)
    return {k: _summary(v) for k, v in sorted(g.items())}


def cross_validation_document(cv: CrossValidation) -> dict[str, Any]:
    """{grouping: {tpot_mape, ttft_mape, tpot_bias, ttft_bias, folds, rows[, warning]}} (fractions)."""
    out: dict[str, Any] = {}
    for name, s in cv.summaries.items():
        out[name] = {"tpot_mape": s.tpot_mape, "ttft_mape": s.ttft_mape, "tpot_bias": s.tpot_bias,
                     "ttft_bias": s.ttft_bias, "folds": s.folds, "rows": s.rows, "tpot_coverage": s.tpot_coverage,
                     "ttft_coverage": s.ttft_coverage}
        if s.warning:
            out[name]["warning"] = s.warning
    return out


def validate_document(result: ValidationResult, worst: int = 10,
                      cross_validation: CrossValidation | None = None,
                      calibrated: dict[str, dict[str, float | int]] | None = None) -> dict[str, Any]:
    """The `servescope.validate/1` JSON document (pure); `cross_validation` adds the out-of-fold accuracy,
    `calibrated` the accuracy of calibrating each series on some of its points (calibrate.held_out)."""
    rows = result.rows
    ranked = sorted(rows, key=lambda r: max(r.tpot_err, r.ttft_err), reverse=True)[:worst]
    extra = {} if cross_validation is None else {"cross_validation": cross_validation_document(cross_validation)}
    if calibrated:
        extra["calibrated"] = calibrated
    return {**extra, **{
        "schema": SCHEMA,
        "rows": [_row(r) for r in rows],
        "n_rows": len(rows),
        "agg_rows": result.n_agg,
        "skipped": [{"id": i, "reason": why} for i, why in result.skipped],
        "tpot_mape": result.tpot_mape,
        "ttft_mape": result.ttft_mape,
        "tpot_coverage": result.tpot_coverage,
        "ttft_coverage": result.ttft_coverage,
        "by_system": _by(rows, "system"),
        "by_backend": _by(rows, "backend"),
        "by_model": _by(rows, "model"),
        "worst": [_row(r) for r in ranked],
    }}


def _row(r: RowResult) -> dict[str, Any]:
    """Predicted against measured for one row; errors are fractions of the measured value."""
    return {"id": r.id, "system": r.system, "backend": r.backend, "model": r.model, "concurrency": r.concurrency,
            "tpot_ms": r.tpot_ms, "pred_tpot_ms": r.pred_tpot_ms, "ttft_ms": r.ttft_ms,
            "pred_ttft_ms": r.pred_ttft_ms, "tpot_err": r.tpot_err, "ttft_err": r.ttft_err, "dominant": r.dominant,
            "pred_tpot_ms_low": r.pred_tpot_ms_low, "pred_tpot_ms_high": r.pred_tpot_ms_high,
            "pred_ttft_ms_low": r.pred_ttft_ms_low, "pred_ttft_ms_high": r.pred_ttft_ms_high}
