"""The example outputs in README.md and docs/*.md, written by running the commands they show.

Usage: .venv/bin/python data-build/doc_examples.py [--dry-run] [--check] [FILE ...]
(default files: README.md and docs/*.md). An example is a console block between two marker comments:

    <!-- example: RULE RULE ... -->
    ```console
    $ servescope plan --model llama-3.1-8b --gpu h100      # a trailing comment is not run
    <the output this script writes>
    ```
    <!-- /example -->

with one RULE per `$` line, in order:
  full           the block shows the command's whole stdout (tests: byte-identical)
  lines=A-B,C    it shows lines A..B and C of the stdout (1-based); a skipped stretch is one `…` line (tests: the
                 shown lines are a verbatim excerpt: each run between `…` lines is contiguous in the real output,
                 in order)
The commands of one block run in order in one fresh temporary folder (so `-o plan.json` then `verify plan.json`
works), with the installed CLI (the `servescope` next to this Python), COLUMNS=120, stdout only (warnings go to
stderr and are not shown), trailing spaces of each line dropped. A command that fails stops the script.
Model numbers change with every refit: rerun this script after one; the ranges of an excerpt may then need moving
if the output gained or lost lines (the diff shows it).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = 120
ELLIPSIS = "…"
BLOCK = re.compile(r"<!-- example: (?P<rules>[^>]*?) -->\n```console\n(?P<body>.*?)```\n<!-- /example -->", re.S)


@dataclass(frozen=True)
class Command:
    """One `$` line of an example block: the command as shown, its rule and the output lines the block shows."""

    shown: str  # the text after "$ ", comment included
    rule: str  # "full" or "lines=A-B,C"
    output: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.shown, comments=True)


@dataclass(frozen=True)
class Example:
    path: Path
    start: int  # offset of the body in the file's text
    end: int
    commands: tuple[Command, ...]


def default_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path, text: str | None = None) -> list[Example]:
    """The marked example blocks of a file; a block whose rules do not match its `$` lines raises ValueError."""
    text = path.read_text(encoding="utf-8") if text is None else text
    examples = []
    for m in BLOCK.finditer(text):
        rules = m.group("rules").split()
        cmds: list[tuple[str, list[str]]] = []
        for line in m.group("body").splitlines():
            if line.startswith("$ "):
                cmds.append((line[2:], []))
            elif cmds:
                cmds[-1][1].append(line)
            else:
                raise ValueError(f"{path.name}: example block output before its first `$` line: {line!r}")
        if len(rules) != len(cmds):
            raise ValueError(f"{path.name}: example block has {len(cmds)} `$` line(s) but {len(rules)} rule(s)")
        for r in rules:
            parse_rule(r, path)
        examples.append(Example(path, m.start("body"), m.end("body"),
                                tuple(Command(c, r, tuple(o)) for (c, o), r in zip(cmds, rules, strict=True))))
    return examples


def parse_rule(rule: str, path: Path) -> list[tuple[int, int]] | None:
    """None for `full`, else the 1-based inclusive line ranges of `lines=...`."""
    if rule == "full":
        return None
    m = re.fullmatch(r"lines=(\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)", rule)
    if not m:
        raise ValueError(f"{path.name}: example rule {rule!r} is neither 'full' nor 'lines=A-B,C'")
    ranges = []
    for part in m.group(1).split(","):
        a, _, b = part.partition("-")
        ranges.append((int(a), int(b or a)))
    return ranges


def cli() -> list[str]:
    """The installed console script beside this interpreter, else `python -m servescope`."""
    exe = Path(sys.executable).parent / "servescope"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "servescope"]


def run_block(example: Example) -> list[list[str]]:
    """Each command's stdout lines (trailing spaces dropped), run in order in one fresh temporary folder."""
    env = {**os.environ, "COLUMNS": str(COLUMNS)}
    outs = []
    with tempfile.TemporaryDirectory(prefix="doc_examples_") as tmp:
        for c in example.commands:
            argv = c.argv
            if not argv or argv[0] != "servescope":
                raise ValueError(f"{example.path.name}: example command is not a servescope command: {c.shown!r}")
            p = subprocess.run(cli() + argv[1:], cwd=tmp, env=env, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise RuntimeError(f"{example.path.name}: `{c.shown}` exited {p.returncode}: {p.stderr.strip()}")
            outs.append([line.rstrip() for line in p.stdout.splitlines()])
    return outs


def excerpt(lines: list[str], ranges: list[tuple[int, int]]) -> list[str]:
    """The lines of `ranges` (clipped to the output), one `…` line for each skipped stretch."""
    shown: list[str] = []
    last = 0
    for a, b in ranges:
        a, b = max(a, last + 1), min(b, len(lines))
        if a > b:
            continue
        if a > last + 1:
            shown.append(ELLIPSIS)
        shown.extend(lines[a - 1:b])
        last = b
    if last < len(lines):
        shown.append(ELLIPSIS)
    return shown


def render(example: Example, outs: list[list[str]]) -> str:
    """The block body for these outputs."""
    body = []
    for c, out in zip(example.commands, outs, strict=True):
        ranges = parse_rule(c.rule, example.path)
        body.append(f"$ {c.shown}")
        body.extend(out if ranges is None else excerpt(out, ranges))
    return "\n".join(body) + "\n"


def regenerate(path: Path) -> tuple[str, str]:
    """(old text, new text) of a file with every example block rewritten from its commands."""
    text = path.read_text(encoding="utf-8")
    new, pos = [], 0
    for ex in parse(path, text):
        new += [text[pos:ex.start], render(ex, run_block(ex))]
        pos = ex.end
    new.append(text[pos:])
    return text, "".join(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="print which files would change, write nothing")
    ap.add_argument("--check", action="store_true", help="exit 1 when a file would change (write nothing)")
    args = ap.parse_args()
    changed = []
    for path in args.files or default_files():
        old, new = regenerate(path)
        n = len(parse(path, old))
        if new != old:
            changed.append(path)
            if not (args.dry_run or args.check):
                path.write_text(new, encoding="utf-8")
        if n:
            state = "unchanged" if new == old else ("would change" if args.dry_run or args.check else "rewritten")
            print(f"{path.relative_to(ROOT)}: {n} example block(s), {state}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
