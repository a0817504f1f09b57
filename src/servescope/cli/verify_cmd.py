"""`servescope verify`: a plan scored against what was measured before and after applying it, and campaign logs."""

from __future__ import annotations

from pathlib import Path

import click

from servescope.cli._app import Output, main, one_line_errors, output_options

_MEASURED_HELP = ("a trace file or folder, a benchmark result file (vllm bench serve / sglang bench_serving), or "
                  "typed figures (repeat: 'tpot=12.1ms@c1', 'output=1536tok/s@c128').")


@main.command("verify")
@click.argument("plan_path", required=False, type=click.Path(path_type=Path))
@click.option("--before", multiple=True, help="What was measured before the change: " + _MEASURED_HELP)
@click.option("--after", multiple=True, help="What was measured after the change: same forms as --before.")
@click.option("--applied", default=None,
              help="The tracks applied, e.g. speculative_decoding or k1,k2, or 'combined' (the plan's combination). "
                   "Default: found from what changed between a before and an after trace (CUDA graphs, speculative "
                   "decoding, the all-reduce kernel, GEMM dtypes, fused norms, the rank count); benchmark files "
                   "and typed figures need it.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append this verification to a campaign log (JSON lines); alone, without PLAN, show the campaign.")
@output_options
@one_line_errors
def verify_command(plan_path: Path | None, before: tuple[str, ...], after: tuple[str, ...], applied: str | None,
                   log_path: Path | None, out: Output) -> None:
    """Score a plan: the measured gain of the applied tracks against the predicted 80% range (inside, above or
    below). PLAN_PATH is `servescope plan … --json -o plan.json`; `verify --log campaign.jsonl` alone shows the
    campaign: every change, predicted vs measured, the running objective and the hit rate of the ranges."""
    from servescope.report.verify_doc import (
        append_log,
        campaign_document,
        read_log,
        read_plan,
        verify_document,
    )
    from servescope.report.verify_text import render_campaign, render_verify

    if plan_path is None:
        if log_path is None:
            raise click.UsageError("give PLAN.json with --before and --after, or --log CAMPAIGN.jsonl alone to show "
                                   "a campaign")
        if before or after or applied:
            raise click.UsageError("--before, --after and --applied need PLAN.json (the plan they verify)")
        campaign = campaign_document(log_path, read_log(log_path))
        out.emit(campaign, text=lambda console: render_campaign(campaign, console), warnings=campaign["warnings"])
        return
    if not before or not after:
        raise click.UsageError("verify needs both --before and --after (a trace, a benchmark result file or typed "
                               "figures such as 'tpot=12.1ms@c1')")
    from servescope.advise import verify_plan
    from servescope.planner.verify import parse_applied

    if log_path is not None:  # refused before anything is measured or written (report.verify_doc.check_log_target)
        from servescope.report.verify_doc import check_log_target

        check_log_target(log_path, (plan_path, *before, *after))

    checked = verify_plan(read_plan(plan_path), before, after, parse_applied(applied))
    if log_path is not None and log_path.exists():  # the campaign so far: was the plan made for this state?
        from dataclasses import replace

        from servescope.errors import PlanError
        from servescope.planner.campaign import logged_applied, stale_plan

        try:
            logged = logged_applied(read_log(log_path))
        except PlanError:  # not a campaign log (append_log says why, or starts a new one)
            logged = ()
        stale = stale_plan(checked.plan.applied, logged, checked.applied)
        checked = replace(checked, warnings=(*checked.warnings, stale)) if stale else checked
    document = verify_document(checked)
    out.emit(document, text=lambda console: render_verify(document, console), warnings=document["warnings"])
    if log_path is not None:
        append_log(log_path, document, inputs=(plan_path, *before, *after))
