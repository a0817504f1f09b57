"""`servescope model`, `specs list|show` and `validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from servescope.cli._app import (
    _console,
    _emit_json,
    _int_list,
    _scenario,
    main,
    one_line_errors,
    scenario_options,
)
from servescope.errors import UnknownName


@main.command()
@scenario_options
@click.option("--concurrency", default="1,16,64,256", show_default=True, help="Comma-separated concurrencies.")
@click.option("--json", "as_json", is_flag=True, help="Print one servescope.model/1 JSON document only.")
@one_line_errors
def model(concurrency: str, as_json: bool, **kw: Any) -> None:
    """What this hardware should do: TPOT, TTFT, throughput, memory and the dominant term per concurrency."""
    from servescope.perfmodel import predict
    from servescope.report.model_doc import model_document
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
    from servescope.perfmodel.validate import validate_csv
    from servescope.report.model_text import render_validation
    from servescope.report.validate_doc import validate_document

    document = validate_document(validate_csv(csv))
    if as_json:
        _emit_json(document)
        return
    render_validation(document, _console())
