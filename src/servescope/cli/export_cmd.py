"""`servescope export`."""

from __future__ import annotations

from pathlib import Path

import click

from servescope.cli._app import main, one_line_errors


@main.command("export")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The annotated trace to write (.json.gz: gzip; .json: plain), atomically.")
@one_line_errors
def export_command(path: Path, output_path: Path) -> None:
    """PATH's Kineto trace with every original event plus servescope's tracks (steps by kind and label, kernel
    classes per GPU), to open in Perfetto UI (https://ui.perfetto.dev). The input is never modified."""
    from servescope.report.perfetto import export_perfetto

    r = export_perfetto(path, output_path)
    click.echo(f"wrote {r.output}: {r.original_events:,} original events + {r.added_events:,} servescope events "
               f"({r.steps} step(s), {r.class_tracks} kernel-class track(s)); open it in https://ui.perfetto.dev")
    for w in r.warnings:
        click.echo(f"servescope: warning: {w}", err=True)
