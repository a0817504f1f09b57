"""Terminal tables of `validate`'s decode-only slice (the `decode_only` section of a `servescope.validate/1`
document; report/validate_doc.py). Presentation only: errors in the document are fractions."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def render_decode_only(d: dict[str, Any], console: Console) -> None:
    """The decode-only slice: its MAPE and bias, per source / system / model, and its worst rows."""
    console.print(Text(f"decode-only rows (decode step at a fixed context, no prompts; no TTFT): TPOT MAPE "
                       f"{100 * d['tpot_mape']:.1f}%, bias {100 * d['tpot_bias']:+.1f}% over {d['n_rows']} rows "
                       f"({len(d['skipped'])} skipped with a reason)", style="bold"))
    for group in ("by_source", "by_system", "by_model"):
        t = Table(title="decode-only " + group.replace("_", " "), title_justify="left")
        for col in ("name", "rows", "TPOT MAPE %", "TPOT bias %"):
            t.add_column(col, justify="left" if col == "name" else "right")
        for name, g in d.get(group, {}).items():
            t.add_row(name or "(none)", str(g["rows"]), f"{100 * g['tpot_mape']:.1f}", f"{100 * g['tpot_bias']:+.1f}")
        console.print(t)
    w = Table(title="decode-only worst rows (measure: step = one decode step; batch = a static batch's latency / "
                    "output tokens)", title_justify="left")
    for col in ("id", "batch", "context", "measure", "TPOT ms", "predicted", "bound"):
        w.add_column(col, justify="left" if col in ("id", "measure", "bound") else "right", overflow="fold",
                     max_width=48 if col == "id" else None)
    for r in d.get("worst", []):
        w.add_row(r["id"], str(r["concurrency"]), f"{r['context']:,}", r["measure"], f"{r['tpot_ms']:.2f}",
                  f"{r['pred_tpot_ms']:.2f}", r["dominant"])
    console.print(w)
    for s in d.get("skipped", []):
        console.print(Text(f"skipped {s['id']}: {s['reason']}", style="yellow"), highlight=False)
