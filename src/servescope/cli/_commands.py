"""The CLI's command table: each command's module imported when one of its commands is first looked up, and the
`--help` list with each command's whole first sentence.

Does: `LazyCommands` (a click group's commands, loaded by name through a name → module table; listing loads them
all), `load_commands_lazily`, `format_commands` (the `--help` command list).
Does not: define commands (the *_cmd modules) or handle errors (cli._app).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import click

__all__ = ["LazyCommands", "format_commands", "load_commands_lazily"]


def _first_sentence(cmd: click.Command) -> str:
    """A command's summary for `--help`: its short help, else the first sentence of its docstring, never cut."""
    if cmd.short_help:
        return cmd.short_help
    text = " ".join((cmd.help or "").split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def format_commands(self: click.Group, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    """The commands of `--help`, each with its whole first sentence (wrapped, not cut at Click's ~45 columns)."""
    rows = [(name, _first_sentence(cmd)) for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
    if rows:
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class LazyCommands(dict[str, click.Command]):
    """A group's commands, each module imported when one of its commands is first looked up (the module registers
    them on `main` as it loads). `modules` maps a command name to the module defining it; a name not in it (a
    typo, or a command added to a module without a line here) imports every module before it is looked up, so
    the table makes lookups fast but never wrong. Listing (`--help`, iteration) imports them all."""

    def __init__(self, modules: dict[str, str]) -> None:
        super().__init__()
        self.modules = modules

    def _load(self, name: object) -> None:
        if dict.__contains__(self, name):
            return
        module = self.modules.get(name) if isinstance(name, str) else None
        for path in [module] if module is not None else dict.fromkeys(self.modules.values()):
            importlib.import_module(path)

    def load_all(self) -> None:
        for path in dict.fromkeys(self.modules.values()):
            importlib.import_module(path)

    def __getitem__(self, name: str) -> click.Command:
        self._load(name)
        return dict.__getitem__(self, name)

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self._load(name)
        return dict.get(self, name, default)

    def __contains__(self, name: object) -> bool:
        self._load(name)
        return dict.__contains__(self, name)

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def keys(self) -> Any:
        self.load_all()
        return dict.keys(self)

    def values(self) -> Any:
        self.load_all()
        return dict.values(self)

    def items(self) -> Any:
        self.load_all()
        return dict.items(self)


def load_commands_lazily(group: click.Group, modules: dict[str, str]) -> None:
    """Give `group` a LazyCommands table (the commands it already holds kept)."""
    table = LazyCommands(modules)
    dict.update(table, group.commands)
    group.commands = table
