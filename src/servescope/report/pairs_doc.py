"""The `servescope.pairs/1` document: the plan's predictions held against the pair ledger (planner.pair_check).

Does: turn the scored rows and the per-track summaries (validation.pairs) into one JSON-ready dict (docs/json.md).
Does not: score or price anything (validation.pairs, planner.pair_check), or draw (report.pairs_text).
"""

from __future__ import annotations

from typing import Any

from servescope.validation.pairs import PairCheck, by_track

SCHEMA = "servescope.pairs/1"


def _row(c: PairCheck) -> dict[str, Any]:
    p, pred = c.pair, c.prediction
    return {"id": p.id, "line": p.line, "track": p.track, "setting": p.setting, "metric": p.metric,
            "before": p.before, "after": p.after, "noise": p.noise, "concurrency": p.concurrency,
            "end_to_end": p.end_to_end, "upper_bound": p.upper_bound, "measured_gain": c.measured,
            "gain": pred.gain, "gain_low": pred.low, "gain_high": pred.high, "sign_right": c.sign_right,
            "error": c.error, "in_range": c.in_range, "priced_by": pred.how, "why_not": pred.why_not or None,
            "source": p.source}


def pairs_document(checks: list[PairCheck], ledger: str) -> dict[str, Any]:
    """{"schema", "ledger", "rows": [...], "tracks": [per-track summary..., the `all` summary]}."""
    return {"schema": SCHEMA, "ledger": ledger, "rows": [_row(c) for c in checks],
            "tracks": [s.as_dict() for s in by_track(checks)]}
