"""Command line: thin. Each command is one library call plus rendering; errors become one line, exit 1."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import msgspec
from rich.console import Console

from servescope.errors import ServescopeError, UnknownName

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


@main.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.trace/1 JSON document only.")
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--top", "top_n", default=10, show_default=True, type=click.IntRange(min=1),
              help="Top kernels per step and kind.")
@one_line_errors
def trace(path: Path | None, as_json: bool, kind: str | None, top_n: int) -> None:
    """Where each serving step's GPU time goes. PATH: a Kineto trace (.json/.json.gz) or a folder of rank files;
    without PATH, the bundled example (vLLM gpt-oss, 8×B200 TP=8, one prefill step)."""
    from servescope.analysis import analyze_trace, example_trace
    from servescope.report.trace_json import trace_document
    from servescope.report.trace_text import render_trace

    analysis = analyze_trace(path or example_trace(), kind=kind, top_n=top_n)
    if as_json:
        _emit_json(trace_document(analysis))
        for w in analysis.warnings:
            click.echo(f"servescope: warning: {w}", err=True)
        return
    render_trace(analysis, _console())


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


@main.command()
@scenario_options
@click.option("--concurrency", default="1,16,64,256", show_default=True, help="Comma-separated concurrencies.")
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.model/1 JSON document only.")
@one_line_errors
def model(concurrency: str, as_json: bool, **kw: Any) -> None:
    """What this hardware should do: TPOT, TTFT, throughput, memory and the dominant term per concurrency."""
    from servescope.perfmodel import model_document, predict
    from servescope.report.model_text import render_points

    points = predict(_scenario(kw), _int_list(concurrency))
    if as_json:
        _emit_json(model_document(points))
        return
    title = (f"{kw['model_name']} on {kw['tp'] * kw['dp'] * kw['pp']}× {kw['gpu']} (TP={kw['tp']} EP={kw['ep']} "
             f"PP={kw['pp']} DP={kw['dp']}), ISL {kw['isl']} / OSL {kw['osl']}")
    render_points(title, points, _console())


@main.group()
def specs() -> None:
    """Bundled hardware and model specs."""


@specs.command("list")
@one_line_errors
def specs_list() -> None:
    """List bundled GPUs and models."""
    from servescope.specs.hardware import list_gpus
    from servescope.specs.models import list_models

    click.echo("GPUs:   " + ", ".join(list_gpus()))
    click.echo("models: " + ", ".join(list_models()))


@specs.command("show")
@click.argument("name")
@one_line_errors
def specs_show(name: str) -> None:
    """Show one GPU or model spec with its sources."""
    from servescope.report.model_text import render_spec
    from servescope.specs.hardware import load_gpu
    from servescope.specs.models import load_model

    try:
        spec: Any = load_gpu(name)
    except UnknownName:
        try:
            spec = load_model(name)
        except UnknownName as exc:
            raise UnknownName(f"{name!r} is neither a bundled GPU nor a model: {exc}") from None
    render_spec(spec, _console())


@main.command()
@click.argument("csv", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.validate/1 JSON document only.")
@one_line_errors
def validate(csv: Path, as_json: bool) -> None:
    """Predicted against measured TPOT and TTFT for a CSV of measured serving results."""
    from servescope.perfmodel.validate import validate_csv, validate_document
    from servescope.report.model_text import render_validation

    document = validate_document(validate_csv(csv))
    if as_json:
        _emit_json(document)
        return
    render_validation(document, _console())


@main.command("plan")
@click.argument("trace_path", required=False, type=click.Path(path_type=Path))
@scenario_options
@click.option("--objective", type=click.Choice(["tpot", "throughput"]), default="tpot", show_default=True)
@click.option("--concurrency", default=1, show_default=True, help="Concurrent requests.")
@click.option("--target", default=None, help="Goal, e.g. 8ms (tpot) or 1000tok/s (throughput).")
@click.option("--tpot-limit", default=None,
              help="Objective throughput: the TPOT each user must keep, e.g. 50ms (default: the baseline's TPOT).")
@click.option("--forbid", default=None, help="Comma-separated tracks never to recommend, e.g. quantization.")
@click.option("--spec-method", default=None, help="eagle3 | eagle | mtp | draft:MODEL")
@click.option("--spec-k", default=None, type=int, help="Drafted tokens per step.")
@click.option("--acceptance", default=None, help="Per-position acceptance P1,P2,… (mean accepted 1+ΣPi).")
@click.option("--acceptance-rate", default=None, type=float, help="Constant per-token acceptance rate A.")
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.plan/1 JSON document only.")
@one_line_errors
def plan_command(trace_path: Path | None, objective: str, concurrency: int, target: str | None,
                 tpot_limit: str | None, forbid: str | None,
                 spec_method: str | None, spec_k: int | None, acceptance: str | None,
                 acceptance_rate: float | None, as_json: bool, **kw: Any) -> None:
    """What will pay: mitigations ranked by predicted gain, the ceiling, and a verdict on --target.
    TRACE_PATH (optional) calibrates the model on a measured trace first."""
    from servescope.advise import advise
    from servescope.planner import plan_document, plan_lines
    from servescope.planner.speculative import spec_from_options
    from servescope.planner.target import parse_target

    spec = spec_from_options(spec_method, spec_k, acceptance, acceptance_rate)
    limit_s = parse_target(tpot_limit, "tpot").tpot_s if tpot_limit else None
    advice = advise(_scenario(kw), trace_path, objective=objective, concurrency=concurrency, target=target,
                    forbid=forbid, spec=spec, tpot_limit_s=limit_s)
    if as_json:
        _emit_json(plan_document(advice.plan))
        for w in advice.plan.warnings:
            click.echo(f"servescope: warning: {w}", err=True)
        return
    for line in plan_lines(advice.plan):
        click.echo(line)
