"""Terminal rendering of `servescope validate --pairs` (Rich): one line per pair, then the per-track table.
Draws from the pairs/1 document only (report/pairs_doc.py)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servescope.report.inert import terminal_safe


def _x(v: Any) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _pct(v: Any) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _yes(v: Any) -> str:
    return "–" if v is None else ("yes" if v else "no")


def render_pairs(doc: dict[str, Any], console: Console) -> None:
    """The pairs (measured vs predicted gain, sign, range) and the per-track summary."""
    rows = Table(title=terminal_safe(f"pairs: {doc['ledger']}"), title_justify="left")
    for col in ("id", "track", "metric", "c", "measured", "predicted", "range", "sign", "error", "in range"):
        rows.add_column(col, justify="left" if col in ("id", "track", "metric") else "right")
    for r in doc["rows"]:
        rng = "–" if r["gain_low"] is None else f"{r['gain_low']:.2f}–{r['gain_high']:.2f}x"
        measured = ("<" if r["upper_bound"] else "") + _x(r["measured_gain"])
        rows.add_row(terminal_safe(r["id"]), r["track"], r["metric"], str(r["concurrency"]), measured,
                     _x(r["gain"]), rng, _yes(r["sign_right"]), _pct(r["error"]), _yes(r["in_range"]))
    console.print(rows)
    for r in doc["rows"]:
        if r["why_not"]:
            console.print(Text(terminal_safe(f"{r['id']}: not priced: {r['why_not']}")), highlight=False)
    table = Table(title="per track", title_justify="left")
    for col in ("track", "rows", "priced", "sign hit rate", "gain MAPE", "end to end", "per kernel", "ranged",
                "range coverage"):
        table.add_column(col, justify="left" if col == "track" else "right")
    for s in doc["tracks"]:
        table.add_row(s["track"], str(s["rows"]), str(s["priced"]), _pct(s["sign_hit_rate"]), _pct(s["mape"]),
                      _pct(s["mape_end_to_end"]), _pct(s["mape_kernel"]), str(s["ranged"]), _pct(s["coverage"]))
    console.print(table)
