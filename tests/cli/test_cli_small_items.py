"""Smaller CLI items of issue 20: COLUMNS sets the width of piped text, --backend takes any case, and an alias
that picks one of several formats (`--quant fp4`) says which it picked."""

from __future__ import annotations

from click.testing import CliRunner

from servescope.cli import main

MODEL = ["model", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1"]


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


def test_a_short_gpu_name_with_several_variants_says_which_it_picked() -> None:
    args = ["model", "--model", "llama-3.1-8b", "--concurrency", "1", "--json"]
    short = CliRunner().invoke(main, [*args, "--gpu", "h100"])
    assert short.exit_code == 0 and "--gpu h100 is read as h100_sxm (also bundled: h100_pcie)" in short.stderr
    assert CliRunner().invoke(main, [*args, "--gpu", "h100_sxm"]).stderr == ""


def test_notes_never_lengthen_an_error() -> None:
    bad = CliRunner().invoke(main, ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--quant", "fp4",
                                    "--tp", "3"])
    assert bad.exit_code == 1 and len(bad.stderr.strip().splitlines()) == 1 and "note" not in bad.stderr
