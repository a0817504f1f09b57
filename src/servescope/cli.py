"""Command line: thin. Each command is one library call plus rendering; errors become one line, exit 1."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from servescope.errors import ServescopeError

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(fn: F) -> F:
    """Turn library errors into `servescope: <message>` on stderr and exit code 1, without a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ServescopeError as exc:
            click.echo(f"servescope: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group()
@click.version_option()
def main() -> None:
    """servescope: LLM-serving traces, performance model, and plans."""
