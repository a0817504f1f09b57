"""The `servescope.validate/1` JSON document of a ValidationResult. Presentation only: rows are copied; the
per-group MAPEs are the same mean of absolute percentage errors as ValidationResult's, over each group's rows. The
decode-only slice (validation.decode_only) is its own `decode_only` section, never mixed into the serving rows."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from servescope.validation.crossval import CrossValidation
from servescope.validation.decode_only import DecodeResult, DecodeValidation, by
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
                      calibrated: dict[str, dict[str, float | int]] | None = None,
                      decode_only: DecodeValidation | None = None) -> dict[str, Any]:
    """The `servescope.validate/1` JSON document (pure); `cross_validation` adds the out-of-fold accuracy,
    `calibrated` the accuracy of calibrating each series on some of its points (calibrate.held_out), `decode_only`
    the decode-only slice."""
    rows = result.rows
    ranked = sorted(rows, key=lambda r: max(r.tpot_err, r.ttft_err), reverse=True)[:worst]
    extra = {} if cross_validation is None else {"cross_validation": cross_validation_document(cross_validation)}
    if calibrated:
        extra["calibrated"] = calibrated
    if decode_only is not None:
        extra["decode_only"] = decode_only_document(decode_only, worst)
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


def decode_only_document(v: DecodeValidation, worst: int = 10) -> dict[str, Any]:
    """{"rows", "n_rows", "skipped", "tpot_mape", "tpot_bias", "by_source", "by_system", "by_model", "worst"}: the
    decode-only rows against the decode-only path (fractions; no TTFT)."""
    def summary(rows: list[DecodeResult]) -> dict[str, Any]:
        return {"rows": len(rows), "tpot_mape": mape([r.tpot_err for r in rows]),
                "tpot_bias": mape([r.tpot_signed for r in rows])}

    ranked = sorted(v.rows, key=lambda r: r.tpot_err, reverse=True)[:worst]
    return {"rows": [_decode_row(r) for r in v.rows], "n_rows": len(v.rows),
            "skipped": [{"id": i, "reason": why} for i, why in v.skipped],
            "tpot_mape": v.tpot_mape, "tpot_bias": v.tpot_bias,
            **{f"by_{a}": {k: summary(g) for k, g in by(v.rows, a).items()} for a in ("source", "system", "model")},
            "worst": [_decode_row(r) for r in ranked]}


def _decode_row(r: DecodeResult) -> dict[str, Any]:
    return {"id": r.id, "source": r.source, "system": r.system, "backend": r.backend, "model": r.model,
            "concurrency": r.concurrency, "context": r.context, "measure": r.measure, "tpot_ms": r.tpot_ms,
            "pred_tpot_ms": r.pred_tpot_ms, "tpot_err": r.tpot_err, "dominant": r.dominant}
