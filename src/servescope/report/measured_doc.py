"""A deployment calibrated on the user's figures (calibrate.figure_fit.FigureFit), as every document and text shows
it: which knob each input set, the measured points, and whether the fit was validated. Presentation only.

JSON (`calibration` of model/1, `measured` of plan/1, sweep and report documents): case, used, notes, status,
validated, tpot_level_fixed, tpot_level_per_batch, basis, terms {knob: {theta, status, prior_sd, post_sd, at_bound, term, set_by}}, knobs
[{name, value, sets, inputs}], points [{concurrency, tpot_ms, output_tok_s (null: not measured), figures}],
residuals {figure: calibrated/measured − 1}, shares [{name, concurrency, share}].
"""

from __future__ import annotations

from typing import Any

from servescope.calibrate.figure_fit import FigureFit
from servescope.units import MS_PER_S


def measured_document(fit: FigureFit) -> dict[str, Any]:
    """The JSON-ready dict of a fit (module docstring)."""
    lv = fit.levels
    return {
        "case": fit.case, "used": list(fit.used), "notes": list(fit.notes), "status": fit.status(),
        "validated": fit.validated, "tpot_level_fixed": lv.tpot_fixed, "tpot_level_per_batch": lv.tpot_var,
        "basis": lv.basis, "terms": _terms(fit),
        "knobs": [{"name": k.name, "value": k.value, "sets": k.sets, "inputs": list(k.inputs)} for k in fit.knobs],
        "points": [{"concurrency": p.concurrency, "tpot_ms": p.tpot_s * MS_PER_S, "output_tok_s": p.output_tok_s,
                    "figures": list(p.figures)} for p in fit.points],
        "residuals": dict(fit.residuals),
        "shares": [{"name": n, "concurrency": c, "share": s} for n, c, s in fit.shares],
    }


def curve_points(fit: FigureFit, n_gpus: int, max_batch: int) -> list[dict[str, Any]]:
    """The measured points where a latency–throughput picture draws them: tok/s per user = 1 / TPOT, tok/s per GPU
    = the measured output tok/s / GPUs, or (no output figure) batch / TPOT / GPUs with batch = min(concurrency,
    memory limit), as the planner's curves count it (`output_from` says which)."""
    out = []
    for p in fit.points:
        batch = max(1, min(p.concurrency, max_batch))
        output = p.output_tok_s if p.output_tok_s is not None else batch / p.tpot_s
        out.append({"concurrency": p.concurrency, "tpot_ms": p.tpot_s * MS_PER_S, "output_tok_s": output,
                    "tok_s_per_user": 1.0 / p.tpot_s, "tok_s_per_gpu": output / max(1, n_gpus),
                    "output_from": "measured" if p.output_tok_s is not None else "batch / TPOT",
                    "figures": list(p.figures)})
    return out


def measured_lines(doc: dict[str, Any]) -> list[str]:
    """Plain-text lines of a fit's document: what was calibrated on, each knob with its inputs, the status."""
    lines = [f"calibrated on {', '.join(doc['used'])}: {doc['status']}"]
    lines += [f"  {k['name']} ×{k['value']:.3g} ({k['sets']}) from {', '.join(k['inputs'])}" for k in doc["knobs"]]
    if doc["validated"] and doc["residuals"]:
        lines.append("  TPOT residuals (calibrated / measured − 1): "
                     + ", ".join(f"{f} {r:+.1%}" for f, r in doc["residuals"].items()))
    return lines


def points_lines(doc: dict[str, Any]) -> list[str]:
    """The measured points, one line each (the curves pass through them)."""
    out = []
    for p in doc["points"]:
        rate = "" if p["output_tok_s"] is None else f", {p['output_tok_s']:,.0f} tok/s"
        out.append(f"  measured point: concurrency {p['concurrency']}: TPOT {p['tpot_ms']:.2f} ms{rate} "
                   f"({', '.join(p['figures'])})")
    return out


def _terms(fit: FigureFit) -> dict[str, Any]:
    """Each knob of the calibration by term: θ (× its term's time), what set it, its prior and posterior spread."""
    if fit.terms is None:
        return {}
    return {k.knob.name: {"theta": k.theta, "term": k.knob.term, "status": k.status, "prior_sd": k.prior_sd,
                          "post_sd": k.post_sd, "at_bound": k.at_bound or None, "set_by": list(k.inputs)}
            for k in fit.terms.knobs}
