"""Tables that fit the terminal without cutting a number: a Rich Console whose `print` refits every Table.

Rich, given a table wider than the console, shrinks every column and cuts cells with "…" (a TPOT of 6.12 prints
"6.…"). Here a table that does not fit is changed, in this documented order, until it fits:
  1. borders go: the compact box (a rule under the header, no vertical lines);
  2. text columns (left-justified: kernel names, labels, ids) shrink to NAME_MIN_WIDTH characters, ending in "…"
     (a text column made to wrap, overflow="fold", wraps onto more lines instead);
  3. columns move, right-most first, into a continuation table that repeats the first (key) column, titled
     "… (continued)" — so every number is still printed, whole, at any width of at least ~40 columns.
Numbers (right-justified columns) never shrink below their widest cell; their headers may wrap at spaces. Nested Groups are refitted too; other renderables pass
through. Does not: choose what a table shows (each renderer does) or colour anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

from servescope.report.inert import terminal_safe

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

NAME_MIN_WIDTH = 16


class _Widths:
    """Cell widths on one console for one fit: each distinct string cell measured once, at the console's options
    read once (reading them asks the OS for the terminal size), with highlighting off (it styles a cell, never
    widens it). A table's columns are measured 3–5 times while it is fitted; this measures each once (issue 30:
    the bundled example's text render spent ~2/3 of its time measuring)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.options = console.options
        self.strings: dict[str, int] = {}

    def cell(self, cell: Any) -> int:
        if isinstance(cell, str):
            known = self.strings.get(cell)
            if known is None:
                known = self.strings[cell] = self._measure(self.console.render_str(cell, highlight=False))
            return known
        return self._measure(cell)

    def _measure(self, renderable: Any) -> int:
        return Measurement.get(self.console, self.options, renderable).maximum


def _cells_width(w: _Widths, col: Column) -> int:
    return max((w.cell(c) for c in col._cells), default=0)


def _natural(w: _Widths, col: Column) -> int:
    """Width a column needs: a number column its widest cell and its header's longest word (the header wraps at
    spaces); a text column its widest cell and its whole header."""
    words = str(col.header).split()
    header = len(str(col.header)) if _is_text(col) else max((len(word) for word in words), default=0)
    return max(header, _cells_width(w, col))


def _is_text(col: Column) -> bool:
    return col.justify in ("left", "default", "full", "center")


def _floor(w: _Widths, col: Column) -> int:
    """The narrowest a column may get: a number column its natural width, a text column NAME_MIN_WIDTH."""
    nat = _natural(w, col)
    return min(nat, max(NAME_MIN_WIDTH, len(str(col.header)))) if _is_text(col) else nat


def _overhead(t: Table) -> int:
    return sum(t._get_padding_width(i) for i in range(len(t.columns))) + t._extra_width


def _fix_widths(w: _Widths, t: Table, width: int) -> None:
    """Fixed column widths: floors, plus what is left of `width` given to text columns up to their natural."""
    widths = [_floor(w, c) for c in t.columns]
    spare = width - sum(widths) - _overhead(t)
    for i, c in enumerate(t.columns):
        if _is_text(c) and spare > 0:
            extra = min(spare, _natural(w, c) - widths[i])
            widths[i] += extra
            spare -= extra
    for c, cw in zip(t.columns, widths, strict=True):
        c.width, c.min_width, c.max_width = cw, None, None
        if _is_text(c) and c.overflow != "fold":  # names: one line, shortened with …
            c.no_wrap, c.overflow = True, "ellipsis"
        else:  # numbers (never narrower than their widest cell) and wrapping text (values, sources)
            c.no_wrap, c.overflow = False, "fold"


def _copy(t: Table, columns: list[Column], title: str | None) -> Table:
    out = Table(title=title, title_justify=t.title_justify, caption=t.caption, box=t.box, show_edge=t.show_edge,
                header_style=t.header_style, padding=t.padding)
    for c in columns:
        out.add_column(c.header, justify=c.justify, no_wrap=c.no_wrap, overflow=c.overflow, style=c.style,
                       min_width=c.min_width, max_width=c.max_width)
    for i in range(t.row_count):
        out.add_row(*[c._cells[i] for c in columns])
    return out


def _fits(w: _Widths, t: Table, width: int, shrunk: bool) -> bool:
    need = (_floor if shrunk else _natural)
    return sum(need(w, c) for c in t.columns) + _overhead(t) <= width


def fit_table(t: Table, console: Console, width: int | None = None) -> list[Table]:
    """The table, or the table and its continuations, each at most `width` (default the console's) wide."""
    return _fitted(t, _Widths(console), width or console.width)


def _fitted(t: Table, w: _Widths, width: int) -> list[Table]:
    if sum(_natural(w, c) if _is_text(c) else max(_natural(w, c), len(str(c.header)))
           for c in t.columns) + _overhead(t) <= width:
        return [t]  # fits with every header on one line: Rich lays it out untouched
    if not _fits(w, t, width, False):
        t.box, t.show_edge = box.SIMPLE_HEAD, False
    if _fits(w, t, width, True) or len(t.columns) <= 2:
        _fix_widths(w, t, width)
        return [t]
    cols = list(t.columns)
    moved: list[Column] = []
    while len(cols) > 2 and not _fits(w, _copy(t, cols, None), width, True):
        moved.insert(0, cols.pop())
    title = str(t.title) if t.title else ""
    first = _copy(t, cols, title or None)
    rest = _copy(t, [t.columns[0], *moved], f"{title} (continued)" if title else "(continued)")
    first.caption, rest.caption = None, t.caption
    _fix_widths(w, first, width)
    return [first, *_fitted(rest, w, width)]


def fit(renderable: Any, console: Console) -> list[Any]:
    """A renderable with every Table in it (directly or in a Group) fitted to the console."""
    if isinstance(renderable, Table):
        return list(fit_table(renderable, console))
    if isinstance(renderable, Group):
        return [Group(*[x for r in renderable.renderables for x in fit(r, console)])]
    return [renderable]


class FittingConsole(Console):
    """A Console whose print() refits tables (see the module docstring) before Rich lays them out, and whose text
    is inert: control characters from inputs (a kernel or file name holding ESC ]0;… BEL) are shown as `\\xNN`
    (report.inert.terminal_safe), in strings before Rich measures them and in any other segment as drawn; Rich's
    own control segments (styles, cursor moves) pass. Emoji codes are not replaced either (`emoji=False`): a kernel
    name holding `:100:` prints as written, and Rich's 3,600-entry emoji table is not imported (~2.5 ms, issue 30)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        env = os.environ
        if "_environ" not in kwargs and any(len(env.get(k, "")) > 6 for k in ("COLUMNS", "LINES")):
            # Rich int()s COLUMNS / LINES when all digits: 5,000 of them is a ValueError; such a size is unset
            kwargs["_environ"] = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES") or len(v) <= 6}
        super().__init__(*args, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        fitted: list[RenderableType] = [x for o in objects for x in fit(o, self)]
        super().print(*fitted, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(terminal_safe(text), **kwargs)

    def render(self, renderable: Any, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and seg.text and _UNSAFE.search(seg.text):
                yield Segment(terminal_safe(seg.text), seg.style, seg.control)
            else:
                yield seg
