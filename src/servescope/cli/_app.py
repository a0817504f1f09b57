"""The CLI group and what every command shares: one-line errors, JSON output, the console, scenario options.

Commands live one module each next to this one (trace_cmd, model_cmd, plan_cmd, ...) and register on `main`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec
from rich.console import Console

from servescope.errors import ServescopeError

if TYPE_CHECKING:
    from servescope.perfmodel import Scenario

# Commands import their library lazily: `servescope trace` on a big file should not pay for the model's imports.
STEP_KINDS = ("prefill", "decode", "mixed", "unknown")

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


class OneLineGroup(click.Group):
    """A group whose usage errors (bad flag values, unknown options) are one line and exit code 1, like library
    errors, instead of Click's multi-line usage block and exit code 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.ClickException as exc:
            click.echo(f"servescope: {exc.format_message()}", err=True)
            sys.exit(1)
        except click.Abort:
            click.echo("servescope: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=OneLineGroup)
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


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or any(not x.strip() for x in text.split(",")):
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return values


def scenario_options(fn: F) -> F:
    """Options shared by `model` and `plan`: the scenario."""
    options = [
        click.option("--model", "model_name", required=True, help="Bundled name, Hugging Face id or config.json path."),
        click.option("--gpu", required=True, help="GPU name (see `servescope specs list`)."),
        click.option("--tp", default=1, show_default=True, help="Tensor parallel degree."),
        click.option("--ep", default=1, show_default=True, help="Expert parallel degree (MoE)."),
        click.option("--pp", default=1, show_default=True, help="Pipeline parallel degree."),
        click.option("--dp", default=1, show_default=True, help="Data / attention-DP degree."),
        click.option("--quant", default="native", show_default=True,
                     help="Weights: native (the checkpoint's own), bf16, fp8, fp8-block, int4-w4a16, nvfp4, mxfp4."),
        click.option("--moe-quant", default=None, help="Routed experts' scheme, if different."),
        click.option("--kv-quant", default=None, help="KV-cache scheme (bf16, fp8)."),
        click.option("--cuda-graphs/--no-cuda-graphs", default=True, show_default=True),
        click.option("--backend", default="vllm", show_default=True, type=click.Choice(["vllm", "sglang", "trtllm"])),
        click.option("--interconnect", default=None, help="Override the GPU's link (e.g. pcie)."),
        click.option("--isl", default=1024, show_default=True, help="Input (prompt) length, tokens."),
        click.option("--osl", default=512, show_default=True, help="Output length, tokens."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _scenario(kw: dict[str, Any]) -> Scenario:
    from servescope.perfmodel import Scenario

    return Scenario.build(
        model=kw["model_name"], gpu=kw["gpu"], tp=kw["tp"], ep=kw["ep"], pp=kw["pp"], dp=kw["dp"],
        quant=kw["quant"], moe_quant=kw["moe_quant"], kv_quant=kw["kv_quant"], cuda_graphs=kw["cuda_graphs"],
        isl=kw["isl"], osl=kw["osl"], backend=kw["backend"], interconnect=kw["interconnect"],
    )
