"""The blocks an HTML page's sections are made of: a table (its cells preformatted as text by `fmt`, numeric columns
marked for right alignment) and a chart (a figure of report/html_charts.py); `eng_seconds` for seconds in
engineering units; `Section`, the type of one section.
Does not: build any section or page (report.html_sections and report.html_pages do; html_sections re-exports
these names).
"""

from __future__ import annotations

from typing import Any

Section = dict[str, Any]


def fmt(x: Any, nd: int = 3) -> str:
    """A cell: numbers with `nd` significant decimals (thousands separated), None as an en dash."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if 1e-9 <= abs(x) < 10.0 ** (1 - nd):  # 0.000117 is 0.000117, never 0.000 (below 1e-9: rounding noise)
            return f"{x:.3g}"
        return f"{x:,.{nd}f}" if abs(x) < 1e6 else f"{x:,.0f}"
    return str(x)


def eng_seconds(x: float | None) -> str:
    """Seconds in engineering units with 3 significant digits: 117 µs, 2.12 ms, 1.65 s."""
    if x is None:
        return "–"
    a = abs(x)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if a >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def table(columns: list[str], rows: list[list[Any]], title: str = "", note: str = "", nd: int = 3) -> dict[str, Any]:
    numeric = [bool(rows) and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) or r[i] is None
                                  for r in rows) for i in range(len(columns))]
    return {"type": "table", "title": title, "note": note, "columns": columns, "numeric": numeric,
            "rows": [[fmt(c, nd) for c in r] for r in rows]}


def chart(figure: dict[str, Any]) -> dict[str, Any]:
    return {"type": "chart", "figure": figure}
