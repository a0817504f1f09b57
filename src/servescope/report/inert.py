r"""Inert outputs (issue 32): text from an input (kernel names, rank-file names, anything a file says) shown so that
it cannot act on the terminal or the spreadsheet that opens it.

Does: `terminal_safe` writes C0 and C1 control characters (ESC, BEL, CSI, DEL, ...; `\n` and `\t` kept in
multi-line text) as visible `\xNN` escapes, so `ESC ]0;title BEL` or `ESC [2J` is printed, never obeyed — used by
report.fit.FittingConsole (every text renderer draws on one) and by the CLI's one-line errors and warnings;
`csv_safe` prefixes a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return with `'` (the OWASP
CSV-injection rule), so a spreadsheet shows it as text instead of running it as a formula — used by
report.csv_tables for every cell and header. Numbers are never touched (a negative number stays a number).
Does not: escape Rich markup (rich.markup.escape, where renderers build markup) or HTML (Jinja autoescape).
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but \t \n, DEL, C1
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # \t and \n too: one line stays one line
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escaped(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group(0)):02x}"


def terminal_safe(text: str, one_line: bool = False) -> str:
    """`text` with every control character written as `\\xNN` (kept: \\n and \\t, unless `one_line`)."""
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    return pattern.sub(_escaped, text) if pattern.search(text) else text


def csv_safe(cell: Any) -> Any:
    """A CSV cell a spreadsheet will not run: a string starting with = + - @ tab or CR gets a leading `'`; a CR
    inside text is written `\r` (the writer ends lines with \n and leaves a bare CR unquoted: a new row)."""
    if not isinstance(cell, str):
        return cell
    text = "'" + cell if cell.startswith(_FORMULA_START) else cell
    return text.replace("\r", "\\r") if "\r" in text else text
