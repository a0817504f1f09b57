"""Command line: thin. Each command is one library call plus rendering; errors become one line, exit 1."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec
from rich.console import Console

from servescope.analysis import STEP_KINDS, analyze_trace, example_trace
from servescope.errors import ServescopeError
from servescope.report.trace_json import trace_document
from servescope.report.trace_text import render_trace

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


def _emit_json(document: dict[str, Any]) -> None:
    """Print one JSON document on stdout and nothing else."""
    click.echo(msgspec.json.format(msgspec.json.encode(document), indent=2).decode())


def _console() -> Console:
    """A terminal console; when output is piped, 120 columns so tables stay readable in files and CI logs."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


@main.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.trace/1 JSON document only.")
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--top", "top_n", default=10, show_default=True, help="Top kernels per step and kind.")
@one_line_errors
def trace(path: Path | None, as_json: bool, kind: str | None, top_n: int) -> None:
    """Where each serving step's GPU time goes. PATH: a Kineto trace (.json/.json.gz) or a folder of rank files;
    without PATH, the bundled example (vLLM gpt-oss, 8×B200 TP=8, one prefill step)."""
    analysis = analyze_trace(path or example_trace(), kind=kind, top_n=top_n)
    if as_json:
        _emit_json(trace_document(analysis))
        for w in analysis.warnings:
            click.echo(f"servescope: warning: {w}", err=True)
        return
    render_trace(analysis, _console())
