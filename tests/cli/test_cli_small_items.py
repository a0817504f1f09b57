"""Smaller CLI items of issue 20: COLUMNS sets the width of piped text, --backend takes any case, and an alias
that picks one of several formats (`--quant fp4`) says which it picked."""

from __future__ import annotations

from click.testing import CliRunner

from servescope.cli import main

MODEL = ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1"]


def test_columns_sets_the_width_of_piped_text() -> None:
    narrow = CliRunner(env={"COLUMNS": "80"}).invoke(main, MODEL).stdout
    wide = CliRunner(env={"COLUMNS": "200"}).invoke(main, MODEL).stdout
    assert max(map(len, narrow.splitlines())) <= 80 < max(map(len, wide.splitlines()))


def test_backend_in_any_case() -> None:
    lower = CliRunner().invoke(main, [*MODEL, "--backend", "sglang", "--json"])
    mixed = CliRunner().invoke(main, [*MODEL, "--backend", "SGLang", "--json"])
    assert mixed.exit_code == 0 and mixed.stdout == lower.stdout


def test_an_ambiguous_quant_alias_says_what_it_picked() -> None:
    result = CliRunner().invoke(main, [*MODEL, "--quant", "fp4", "--json"])
    assert result.exit_code == 0 and "--quant fp4 is read as nvfp4" in result.stderr
    exact = CliRunner().invoke(main, [*MODEL, "--quant", "nvfp4", "--json"])
    assert exact.stderr == "" and exact.stdout == result.stdout


def test_top_level_help_does_not_cut_the_descriptions() -> None:
    text = CliRunner().invoke(main, ["--help"]).output
    commands = text[text.index("Commands:"):]
    assert not [line for line in commands.splitlines() if line.rstrip().endswith("...")]  # Click's cut mark
    flat = " ".join(text.split())
    for name in ("model", "plan", "verify", "sweep"):
        sentence = " ".join((main.commands[name].help or "").split()).split(". ")[0]
        assert sentence.rstrip(".") in flat, name
