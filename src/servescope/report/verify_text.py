"""Terminal rendering of `servescope verify` (Rich): a plan scored against before/after measurements, and a
campaign log. Draws from the verify/1 and campaign/1 documents only (report/verify_doc.py); nothing is scored
here."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servescope.report.inert import terminal_safe

_GAIN_WORDS = {"tpot": "TPOT before / after", "throughput": "output tok/s after / before"}
_METRIC = {"tpot": "TPOT", "throughput": "output"}
_STYLE = {"inside": "green", "above": "cyan", "below": "red"}
_APPLIED_FROM = {"named": "named with --applied", "found": "found from what changed between the traces",
                 "plan_combined": "the plan's combination: --applied combined"}


def _num(x: Any, unit: str) -> str:
    if x is None:
        return "–"
    return f"{x:,.2f} {unit}" if unit == "ms" else f"{x:,.1f} {unit}"


def _x(x: Any) -> str:
    return "–" if x is None else f"{x:.2f}x"


def _say(console: Console, text: str, style: str = "") -> None:
    console.print(Text(text, style=style), highlight=False)


def verify_lines(doc: dict[str, Any]) -> list[str]:
    """The verdict sentence of a verify/1 document (plain text)."""
    c = doc["check"]
    what = " + ".join(c["tracks"])
    rng = f"{c['gain_low']:.2f}–{c['gain_high']:.2f}x"
    if c["verdict"] == "inside":
        tail = f"inside the predicted {rng}"
    else:
        tail = f"{c['verdict']} the predicted {rng} (off by {c['miss']:.2f}x)"
    return [f"verdict: {c['verdict']} — {what}: measured {c['measured_gain']:.2f}x vs predicted {c['gain']:.2f}x, "
            f"{tail}; scored against {c['basis_text']}"]


def render_verify(doc: dict[str, Any], console: Console) -> None:
    """One verification: what was measured, the gain, each applied track's prediction, the verdict, warnings."""
    obj, unit = doc["objective"], doc["before"]["unit"]
    applied = _APPLIED_FROM[doc["applied_from"]]
    _say(console, f"verify {doc['plan']}: {obj} at concurrency {doc['concurrency']}; {doc['range_basis']} ranges "
                  f"(80%); applied: {', '.join(doc['applied'])} ({applied})", "bold")
    for f in doc.get("found", ()):
        _say(console, f"found {f['kind']}: {f['evidence']}")
    _say(console, f"plan baseline: {_METRIC[obj]} {_num(doc['baseline']['value'], unit)} "
                  f"({doc['baseline'].get('basis', 'modelled')})")
    for side in ("before", "after"):
        m = doc[side]
        where = "" if m["source"] in m["detail"] else f" ({m['source']})"
        _say(console, f"{side + ':':<7} {_METRIC[obj]} {_num(m['value'], unit)} — {m['detail']}{where}")
    _say(console, f"measured gain: {doc['measured_gain']:.3f}x ({_GAIN_WORDS[obj]})")
    t = Table(box=None, pad_edge=False)
    for col in ("track", "predicted", "80% low", "80% high", "measured", "verdict"):
        t.add_column(col, justify="left" if col in ("track", "verdict") else "right")
    for r in doc["tracks"]:
        t.add_row(r["kind"], _x(r["gain"]), _x(r["gain_low"]), _x(r["gain_high"]), _x(r["measured_gain"]),
                  Text(r["verdict"] or "(together)", style=_STYLE.get(r["verdict"] or "", "")))
    c = doc["check"]
    if len(doc["tracks"]) > 1:
        t.add_row(f"together ({c['basis']})", _x(c["gain"]), _x(c["gain_low"]), _x(c["gain_high"]),
                  _x(c["measured_gain"]), Text(c["verdict"], style=_STYLE[c["verdict"]]))
    console.print(t)
    for line in verify_lines(doc):
        _say(console, line, _STYLE[c["verdict"]])
    for w in doc["warnings"]:
        _say(console, f"warning: {w}", "yellow")


SHOWN_WARNINGS = 20  # a long campaign's warnings in the text view; --json has every one
LONG_CAMPAIGN = 200  # more entries than this: one plain line per entry (linear: 20,000 entries in well under 2 s)
_CAMPAIGN_COLUMNS = ("#", "tracks", "predicted", "80% range", "measured", "verdict", "before", "after", "since start")
_LEFT = ("tracks", "verdict", "80% range")


def _plain_table(cells: list[tuple[str, ...]], console: Console) -> None:
    """The campaign table as aligned plain lines, widths from one pass (a Rich Table lays out and refits every
    cell: minutes for 20,000 entries)."""
    rows = [_CAMPAIGN_COLUMNS, *cells]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_CAMPAIGN_COLUMNS))]
    lines = ["  ".join(c.ljust(w) if name in _LEFT else c.rjust(w)
                       for c, w, name in zip(r, widths, _CAMPAIGN_COLUMNS, strict=True)).rstrip() for r in rows]
    console.file.write(terminal_safe("\n".join(lines)) + "\n")  # plain text, written as is: no layout to do


def render_campaign(doc: dict[str, Any], console: Console) -> None:
    """A campaign log: each change in order, predicted vs measured, the running objective, the hit rate."""
    n = len(doc["entries"])
    _say(console, f"campaign {doc['log']}: {n} verification(s), objective {doc['objective']}", "bold")
    cells: list[tuple[str, ...]] = [(str(r["n"]), " + ".join(str(k) for k in r["tracks"]), _x(r["gain"]),
              f"{r['gain_low']:.2f}–{r['gain_high']:.2f}x", _x(r["measured_gain"]), str(r["verdict"]),
              _num(r["before"], r["unit"]), _num(r["after"], r["unit"]), _x(r["since_start"]))
             for r in doc["entries"]]
    if len(cells) > LONG_CAMPAIGN:
        _plain_table(cells, console)
    else:
        t = Table(box=None, pad_edge=False)
        for col in _CAMPAIGN_COLUMNS:
            t.add_column(col, justify="left" if col in _LEFT else "right")
        for row in cells:
            t.add_row(*row[:5], Text(row[5], style=_STYLE.get(row[5], "")), *row[6:])
        console.print(t)
    start, now = doc["start"], doc["now"]
    metric = _METRIC.get(doc["objective"], doc["objective"])
    _say(console, f"{metric}: {_num(start['value'], start['unit'])} at the start → {_num(now['value'], now['unit'])} "
                  f"now ({_x(doc['total_gain'])}: the measured gains multiplied)")
    rate = "–" if doc["hit_rate"] is None else f"{doc['hit_rate']:.0%}"
    _say(console, f"ranges hit: {doc['inside']} of {doc['scored']} inside ({rate}); {doc['above']} above, "
                  f"{doc['below']} below (an 80% range should hold about 4 in 5)")
    for w in doc["warnings"][:SHOWN_WARNINGS]:
        _say(console, f"warning: {w}", "yellow")
    if len(doc["warnings"]) > SHOWN_WARNINGS:
        _say(console, f"warning: {len(doc['warnings']) - SHOWN_WARNINGS} more warnings (--json lists them all)",
             "yellow")
