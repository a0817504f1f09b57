"""The README's and docs' example outputs are what the commands they show print today.

Each marked block (data-build/doc_examples.py) is re-run with the installed CLI. Rule `full`: the shown output is
byte-identical to the command's stdout (trailing spaces dropped). Rule `lines=…`: the shown lines are a verbatim
excerpt — each run of lines between `…` lines occurs contiguously in the real stdout, the runs in order. A failure
after a model refit is fixed by `python data-build/doc_examples.py`, never by editing a block by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_scripts import bench_script

doc_examples = bench_script("doc_examples")
EXAMPLES = [ex for path in doc_examples.default_files() for ex in doc_examples.parse(path)]


def runs(shown: tuple[str, ...]) -> list[list[str]]:
    """The shown lines split at `…` lines (empty runs dropped)."""
    out: list[list[str]] = [[]]
    for line in shown:
        if line == doc_examples.ELLIPSIS:
            out.append([])
        else:
            out[-1].append(line)
    return [r for r in out if r]


def is_excerpt(shown: tuple[str, ...], real: list[str]) -> bool:
    """Every run of `shown` found contiguously in `real`, each after the previous one."""
    pos = 0
    for run in runs(shown):
        at = next((i for i in range(pos, len(real) - len(run) + 1) if real[i:i + len(run)] == run), None)
        if at is None:
            return False
        pos = at + len(run)
    return True


def test_the_docs_have_examples_and_each_block_parses():
    # README's trace, plan and verify blocks at least; every rule is full or lines=
    assert sum(ex.path.name == "README.md" for ex in EXAMPLES) >= 3
    assert all(c.rule == "full" or c.rule.startswith("lines=") for ex in EXAMPLES for c in ex.commands)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda ex: f"{ex.path.name}:{ex.commands[0].argv[1]}")
def test_example_block_matches_the_cli(example):
    outs = doc_examples.run_block(example)
    for cmd, real in zip(example.commands, outs, strict=True):
        assert real or cmd.rule == "full", f"`{cmd.shown}` printed nothing, yet the block shows an excerpt"
        if cmd.rule == "full":
            assert list(cmd.output) == real, f"`{cmd.shown}`: block differs; run data-build/doc_examples.py"
        else:
            assert is_excerpt(cmd.output, real), f"`{cmd.shown}`: not an excerpt; run data-build/doc_examples.py"


def test_excerpt_check_rejects_reordered_and_edited_lines():
    real = ["a", "b", "c", "d"]
    assert is_excerpt(("a", "b", "…", "d"), real)
    assert not is_excerpt(("b", "a"), real)
    assert not is_excerpt(("a", "c"), real)  # not contiguous without a … between them
    assert not is_excerpt(("d", "…", "a"), real)
    assert not is_excerpt(("a", "B"), real)


def test_the_script_renders_an_excerpt_with_one_ellipsis_per_gap(tmp_path: Path):
    lines = [f"l{i}" for i in range(1, 11)]
    assert doc_examples.excerpt(lines, [(2, 3), (5, 5)]) == ["…", "l2", "l3", "…", "l5", "…"]
    assert doc_examples.excerpt(lines, [(1, 10)]) == lines
    doc = tmp_path / "x.md"
    doc.write_text("<!-- example: full lines=1 -->\n```console\n$ servescope a\n$ servescope b\n```\n"
                   "<!-- /example -->\n", encoding="utf-8")
    (ex,) = doc_examples.parse(doc)
    assert doc_examples.render(ex, [["x", "y"], ["p", "q"]]) == "$ servescope a\nx\ny\n$ servescope b\np\n…\n"
    doc.write_text("<!-- example: full -->\n```console\n$ servescope a\n$ servescope b\n```\n<!-- /example -->\n",
                   encoding="utf-8")
    with pytest.raises(ValueError, match="2 `\\$` line"):
        doc_examples.parse(doc)
