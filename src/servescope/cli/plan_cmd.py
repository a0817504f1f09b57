"""`servescope plan`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from servescope.cli._app import (
    Output,
    main,
    note,
    one_line_errors,
    output_options,
)
from servescope.cli._measured import measured_figures, measured_option
from servescope.cli._scenario import _scenario, scenario_options

if TYPE_CHECKING:
    from servescope.validation.enginelog import EngineLog

F = TypeVar("F", bound=Callable[..., Any])


def plan_goal_options(fn: F) -> F:
    """The plan's goal and speculative-decoding options, shared by `plan` and `report` (its page's plan):
    --target, --forbid, --spec-method, --spec-k, --acceptance, --acceptance-rate."""
    options = [
        click.option("--target", default=None, help="Goal, e.g. 8ms (tpot) or 1000tok/s (throughput)."),
        click.option("--forbid", default=None, help="Comma-separated tracks never to recommend, e.g. quantization."),
        click.option("--spec-method", default=None,
                     help="eagle3 | eagle | mtp | ngram | draft:MODEL | eagle3:HEAD_CONFIG (the head's config.json)."),
        click.option("--spec-k", default=None, type=int, help="Drafted tokens per step."),
        click.option("--acceptance", default=None, help="Per-position acceptance P1,P2,… (mean accepted 1+ΣPi)."),
        click.option("--acceptance-rate", default=None, type=float, help="Constant per-token acceptance rate A."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command("plan")
@click.argument("trace_path", required=False, type=click.Path(path_type=Path))
@scenario_options
@click.option("--objective", type=click.Choice(["tpot", "throughput"]), default=None,
              help="Default: throughput when --target is a rate (tok/s), else tpot.")
@click.option("--concurrency", default=1, show_default=True, help="Concurrent requests.")
@click.option("--tpot-limit", default=None,
              help="Objective throughput: the TPOT each user must keep, e.g. 50ms (default: the baseline's TPOT).")
@plan_goal_options
@click.option("--engine-log", "engine_log", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The engine's log: its KV-cache capacity sizes the KV pool (the memory limit), and the "
                   "per-position acceptance of its 'SpecDecoding metrics' lines (vLLM) prices speculative decoding "
                   "instead of a published curve (--acceptance wins).")
@measured_option
@click.option("--applied", default=None,
              help="Tracks already applied, e.g. custom_allreduce or k1,k2: the plan is made on the state after them "
                   "(listed as applied, the rest priced on that state).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A campaign log (servescope verify --log): the tracks its entries applied count as --applied.")
@output_options
@one_line_errors
def plan_command(trace_path: Path | None, objective: str | None, concurrency: int, target: str | None,
                 tpot_limit: str | None, forbid: str | None,
                 spec_method: str | None, spec_k: int | None, acceptance: str | None,
                 acceptance_rate: float | None, engine_log: Path | None, measured: tuple[str, ...],
                 applied: str | None, log_path: Path | None, out: Output, **kw: Any) -> None:
    """What will pay: mitigations ranked by predicted gain, the ceiling, and a verdict on --target.
    TRACE_PATH (optional) calibrates the model on a measured trace first; --measured on your own figures or
    benchmark results (each gain then stated on the measured baseline)."""
    from servescope.advise import advise
    from servescope.planner.speculative import spec_from_options
    from servescope.planner.target import implied_objective, parse_target
    from servescope.report.plan_doc import plan_document
    from servescope.report.plan_text import plan_lines, render_plan_lines

    log = None
    if engine_log is not None:
        from servescope.cli._engine_log import read_log

        log = read_log(engine_log)
        if acceptance is None and acceptance_rate is None:
            acceptance = _logged_acceptance(log)
    spec = spec_from_options(spec_method, spec_k, acceptance, acceptance_rate)
    limit_s = parse_target(tpot_limit, "tpot").tpot_s if tpot_limit else None
    scenario = _scenario(kw)
    if log is not None:
        from servescope.cli._engine_log import with_logged_kv

        scenario = with_logged_kv(scenario, log)
    figures = measured_figures(measured, scenario)
    advice = advise(scenario, trace_path, figures, objective=implied_objective(target, objective),
                    concurrency=concurrency, target=target, forbid=forbid, spec=spec, tpot_limit_s=limit_s,
                    applied=_applied(applied, log_path))
    for n in advice.fit.notes if advice.fit is not None else ():
        note(n)
    document = plan_document(advice.plan)
    if out.format == "html":  # the page also draws the latency–throughput curve of each paying track
        from servescope.planner.curves import plan_curves
        from servescope.report.overview_doc import curves_document

        document = {**document, "curves": curves_document(plan_curves(advice.plan))}
    out.emit(document, text=lambda console: render_plan_lines(plan_lines(advice.plan), console),
             warnings=advice.plan.warnings)


def _applied(applied: str | None, log_path: Path | None) -> tuple[str, ...]:
    """The tracks already applied: those the campaign log's entries applied, in order, then --applied's."""
    from servescope.planner.campaign import logged_applied
    from servescope.planner.verify import parse_applied

    logged: tuple[str, ...] = ()
    if log_path is not None:
        from servescope.report.verify_doc import read_log

        logged = logged_applied(read_log(log_path))
        note(f"{log_path}: applied so far: {', '.join(logged) or 'nothing'}")
    return tuple(dict.fromkeys((*logged, *(parse_applied(applied) or ()))))


def _logged_acceptance(log: EngineLog) -> str | None:
    """The per-position acceptance an engine log states, as --acceptance takes it (None, with a warning on stderr,
    when it states none)."""
    if log.acceptance is None:
        if not log.warnings and log.kv_cache_tokens is None:
            click.echo(f"servescope: warning: {log.path}: no per-position acceptance in the log; the bundled curve "
                       "is used", err=True)
        return None
    return ",".join(f"{p:.6g}" for p in log.acceptance)
