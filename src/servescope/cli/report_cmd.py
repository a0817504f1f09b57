"""`servescope report`: one self-contained HTML page of a trace (and, with a scenario, its calibrated plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from servescope.cli._app import STEP_KINDS, Output, _scenario, main, one_line_errors, output_options

SCENARIO_KEYS = ("model_name", "gpu")


def _optional_scenario(fn: Any) -> Any:
    """The scenario options of `model`/`plan`, all optional here: --model and --gpu together turn on the model."""
    options = [
        click.option("--model", "model_name", default=None, help="Bundled name, Hugging Face id or config.json path."),
        click.option("--gpu", default=None, help="GPU name (see `servescope specs list`)."),
        click.option("--tp", default=1, show_default=True, help="Tensor parallel degree."),
        click.option("--ep", default=1, show_default=True, help="Expert parallel degree (MoE)."),
        click.option("--pp", default=1, show_default=True, help="Pipeline parallel degree."),
        click.option("--dp", default=1, show_default=True, help="Data / attention-DP degree."),
        click.option("--quant", default="native", show_default=True, help="Weights scheme (see `servescope model`)."),
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


@main.command("report")
@click.argument("path", type=click.Path(path_type=Path))
@_optional_scenario
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--objective", type=click.Choice(["tpot", "throughput"]), default="tpot", show_default=True)
@click.option("--concurrency", default=1, show_default=True, help="Concurrent requests for the plan.")
@output_options
@one_line_errors
def report_command(path: Path, kind: str | None, objective: str, concurrency: int, out: Output, **kw: Any) -> None:
    """One self-contained HTML page of a trace: findings, time by class per step kind, a step's timeline,
    collectives, low-occupancy kernels; with --model and --gpu also measured vs modelled, the plan and the
    latency–throughput curve. Default output: HTML (use -o report.html)."""
    from servescope.overview import overview
    from servescope.report.overview_doc import overview_document

    if (kw["model_name"] is None) != (kw["gpu"] is None):
        raise click.UsageError("--model and --gpu go together (both to add the model and plan, neither for the trace)")
    scenario = _scenario(kw) if kw["model_name"] is not None else None
    document = overview_document(overview(path, scenario, kind=kind, objective=objective, concurrency=concurrency)
                                 if scenario is not None else overview(path, kind=kind))
    fmt = out if out.format != "text" else Output("html", out.path)
    fmt.emit(document, warnings=document["trace"]["warnings"])
