"""Every table readable at 80 columns (report/fit.py): no line wider than the terminal, every number of every
table column printed whole (the cells, captured before layout, found as tokens in the 80-column output), and
every standalone number of the 120-column output also present at 80. Plan text: preconditions, how to verify,
the resolved GPU spec name, no "all of the above" about an unprinted list."""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table

import servescope.cli._app as app
import servescope.report.fit as fit
from servescope.analysis.analyze import example_trace
from servescope.cli import main

DATA = Path(__file__).parents[1] / "data/traces"
COMMANDS = {
    "trace-example": ["trace", str(example_trace())],
    "trace-sglang": ["trace", str(DATA / "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")],
    "trace-ranks": ["trace", str(DATA / "hta/trace_filter")],
    "model": ["model", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
              "int4-w4a16", "--concurrency", "1,16,64,256"],
    "plan": ["plan", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
             "int4-w4a16"],
    "specs-gpu": ["specs", "show", "h100"],
    "specs-model": ["specs", "show", "kimi-k2.5"],
    "diff": ["diff", str(DATA / "hta/trace_diff/control/control.json.gz"),
             str(DATA / "hta/trace_diff/test/test.json.gz")],
}
NUMBER = re.compile(r"(?<![\w.…/=+-])-?\d[\d,]*(?:\.\d+)?%?(?![\w…])")


def _render(args: list[str], width: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str], list[str]]:
    """(output, cells of number columns, cells of text columns) of a command at `width` columns."""
    buf = io.StringIO()
    numeric: list[str] = []
    text: list[str] = []
    original = fit.fit_table

    def recording(t: Table, console: Any, w: int | None = None) -> list[Table]:
        if "(continued)" not in str(t.title or ""):
            for c in t.columns:
                cells = [str(x) for x in c._cells]
                (text if fit._is_text(c) else numeric).extend(cells)
        return original(t, console, w)

    with monkeypatch.context() as m:
        m.setattr(fit, "fit_table", recording)
        m.setattr(app, "_console", lambda: fit.FittingConsole(file=buf, width=width, color_system=None))
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return buf.getvalue() + result.stdout, numeric, text


def _numbers(text: str) -> Counter[str]:
    return Counter(m.group(0).rstrip(",") for m in NUMBER.finditer(text))


@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_80_columns_without_cutting_a_number(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = COMMANDS[name]
    if args[0] not in main.commands:
        pytest.skip(f"no `servescope {args[0]}` command in this build")
    wide, _, wide_text = _render(args, 120, monkeypatch)
    narrow, numeric, text_cells = _render(args, 80, monkeypatch)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    tokens = set(narrow.split())
    missing = [c for c in numeric if any(w not in tokens for w in c.split())]
    assert missing == [], f"number cells not printed whole at 80 columns: {missing[:10]}"
    # names may be shortened with …; numbers inside names are not counted. Longest first: a label may extend
    # another (`elementwise_kernel` and `elementwise_kernel #2` in one table).
    for cell in sorted({*text_cells, *wide_text}, key=len, reverse=True):
        wide = wide.replace(cell, " ")
        narrow = narrow.replace(cell, " ")
    lost = _numbers(wide) - _numbers(narrow)
    assert not lost, f"numbers at 120 columns missing at 80: {dict(lost)}"


def test_fit_moves_columns_and_keeps_the_key() -> None:
    t = Table(title="wide")
    t.add_column("name")
    for i in range(12):
        t.add_column(f"value {i}", justify="right")
    t.add_row("row", *[f"{1234.5678 * (i + 1):,.3f}" for i in range(12)])
    console = fit.FittingConsole(file=io.StringIO(), width=80, color_system=None)
    parts = fit.fit_table(t, console)
    assert len(parts) >= 2 and all(p.columns[0].header == "name" for p in parts)
    assert [c.header for p in parts for c in p.columns[1:]] == [f"value {i}" for i in range(12)]
    console.print(*parts)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(x) for x in out.splitlines()) <= 80 and "(continued)" in out
    assert all(f"{1234.5678 * (i + 1):,.3f}" in out for i in range(12))


def test_plan_prints_needs_verify_and_the_resolved_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    out, _, _ = _render(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "2"], 80, monkeypatch)
    assert "h100_sxm" in out and "all of the above" not in out
    tracks = re.findall(r"^\s+\d+\.\d+x \(", out, re.M)
    assert tracks and "needs:" in out and "verify:" in out


@given(names=st.lists(st.text(alphabet="abcdefghij_<>:", min_size=1, max_size=60), min_size=1, max_size=6),
       values=st.lists(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=12),
       width=st.integers(min_value=40, max_value=140))
@settings(max_examples=40, deadline=None)
def test_fit_property_every_number_whole_at_any_width(names: list[str], values: list[float], width: int) -> None:
    t = Table(title="t")
    t.add_column("kernel")
    for i in range(len(values)):
        t.add_column(f"col {i} ms", justify="right")
    cells = [[f"{v * (r + 1):,.3f}" for v in values] for r in range(len(names))]
    for name, row in zip(names, cells, strict=True):
        t.add_row(name, *row)
    console = fit.FittingConsole(file=io.StringIO(), width=width, color_system=None)
    console.print(t)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(x) for x in out.splitlines()) <= width
    tokens = set(out.split())
    assert all(c in tokens for row in cells for c in row)


def test_fit_measures_each_distinct_cell_once_without_highlighting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that needs continuations is measured several times over while it is fitted; each distinct string cell
    is rendered for measuring once, unhighlighted (highlighting styles a cell, never widens it; issue 30)."""
    t = Table(title="wide")
    t.add_column("name")
    for i in range(12):
        t.add_column(f"value {i}", justify="right")
    for r in range(20):
        t.add_row(f"row {r % 5}", *[f"{1234.5678 * (i + 1):,.3f}" for i in range(12)])
    distinct = {f"row {r}" for r in range(5)} | {f"{1234.5678 * (i + 1):,.3f}" for i in range(12)}
    console = fit.FittingConsole(file=io.StringIO(), width=80, color_system=None)
    calls: list[tuple[str, object]] = []
    real = fit.FittingConsole.render_str

    def counting(self: fit.FittingConsole, text: str, **kwargs: Any) -> Any:
        calls.append((text, kwargs.get("highlight")))
        return real(self, text, **kwargs)

    monkeypatch.setattr(fit.FittingConsole, "render_str", counting)
    parts = fit.fit_table(t, console)
    assert len(parts) >= 3  # fitted in several rounds: the first table, continuations of continuations
    assert Counter(text for text, _ in calls) == Counter(distinct)  # 12 + 5 strings, each once, for 260 cells
    assert {h for _, h in calls} == {False}
