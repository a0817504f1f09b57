"""An -o suffix that names no format is an error for every command (issue 20: `-o x.pdf` silently wrote HTML or
text); a suffix-less name or a device still gets text, and --format overrides the suffix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main

COMMANDS = [["trace"], ["model", "--model", "llama-3.1-8b", "--gpu", "h100"],
            ["plan", "--model", "llama-3.1-8b", "--gpu", "h100"], ["specs", "list"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_unknown_suffix_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str]) -> None:
    target = tmp_path / "out.pdf"
    result = CliRunner().invoke(main, [*args, "-o", str(target)])
    assert result.exit_code == 1 and "unknown suffix '.pdf'" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not target.exists()


def test_no_suffix_is_text_and_format_overrides(tmp_path: Path) -> None:
    plain = tmp_path / "out"
    assert CliRunner().invoke(main, ["specs", "list", "-o", str(plain)]).exit_code == 0
    assert not plain.read_text().lstrip().startswith("{")
    forced = tmp_path / "out.pdf"
    assert CliRunner().invoke(main, ["specs", "list", "--format", "json", "-o", str(forced)]).exit_code == 0
    assert forced.read_text().lstrip().startswith("{")
