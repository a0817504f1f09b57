"""`servescope trace`; `--timings` prints the wall time of each stage on stderr (servescope.progress.stage)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING

import click

from servescope.analysis.vocab import STEP_KINDS
from servescope.cli._app import (
    Output,
    main,
    note,
    one_line_errors,
    output_options,
)
from servescope.progress import stage, timing

if TYPE_CHECKING:
    from rich.console import Console

    from servescope.analysis.rank_cache import CacheUse

STAGES = ("import", "load", "classify", "steps", "breakdown", "findings", "render")


class Timings:
    """Wall seconds per stage, summed over the stage's runs (one per rank in this process), and the command's."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.start = perf_counter()

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def line(self) -> str:
        total = perf_counter() - self.start
        names = [n for n in (*STAGES, *sorted(set(self.seconds) - set(STAGES))) if n in self.seconds]
        staged = sum(self.seconds.values())
        return (f"timings (wall s): {', '.join(f'{n} {self.seconds[n]:.3f}' for n in names)}; other "
                f"{total - staged:.3f}; command {total:.3f} (interpreter start and CLI import not included)")


def _rank_cache(folder: Path | None) -> AbstractContextManager[CacheUse | None]:
    """`--cache DIR`: rank folders analysed inside use the per-rank cache there (analysis.rank_cache)."""
    if folder is None:
        return nullcontext()
    from servescope.analysis.rank_cache import caching

    return caching(folder)


@main.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--kind", type=click.Choice(STEP_KINDS), help="Only steps of this kind.")
@click.option("--top", "top_n", default=10, show_default=True, type=click.IntRange(min=1, max=1_000_000),
              help="Top kernels per step and kind.")
@click.option("--per-rank", is_flag=True, help="Rank folder: the full report for every rank, not the cross-rank view.")
@click.option("--workers", type=click.IntRange(min=1, max=1024), default=None,
              help="Rank folder: worker processes (default: one per core; 1 = in-process).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              help="Rank folder: analyse ranks as Ray tasks; bare --ray starts or joins a local Ray, --ray ADDRESS "
                   "joins a cluster (needs servescope[ray]; put PATH first).")
@click.option("--cache", "cache", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Rank folder: keep each rank's summary in DIR (a Parquet file per folder, keyed by file size, "
                   "mtime and servescope version) so that a second run analyses only the files that changed.")
@click.option("--capture", type=click.Path(path_type=Path), default=None,
              help="A CUDA/HIP-graph capture trace of the same deployment: graph-replayed kernels take its shapes "
                   "(matched by kernel name; docs/capture.md).")
@click.option("--timings", "show_timings", is_flag=True,
              help="Print the wall time of each stage on stderr: import (the analysis libraries), load, classify, "
                   "steps, breakdown, findings, render; a rank folder's files analysed in worker processes are not "
                   "itemised (--workers 1 itemises them).")
@output_options
@one_line_errors
def trace(path: Path | None, out: Output, kind: str | None, top_n: int, per_rank: bool, workers: int | None,
          ray_address: str | None, capture: Path | None, show_timings: bool, cache: Path | None) -> None:
    """Where each serving step's GPU time goes. PATH: a Kineto trace (.json/.json.gz) or a folder of rank files;
    without PATH, the bundled example (vLLM gpt-oss, 8×B200 TP=8, one prefill step)."""
    from servescope.analysis.rank_workers import start_for_folder

    if path is None and ray_address is not None and Path(ray_address).exists():  # `--ray FOLDER`: bare --ray
        path, ray_address = Path(ray_address), "local"
    timings = Timings() if show_timings else None
    # A rank folder's worker processes start here, before Polars is imported, so that they fork (rank_workers).
    with (start_for_folder(path, workers, ray_address, "servescope.analysis.ranks") or nullcontext() as pool,
          timing(timings.add if timings is not None else None)):
        with stage("import"):
            from servescope.advise import analyze
            from servescope.analysis.analyze import example_trace
            from servescope.analysis.ranks import without_timelines

        with _rank_cache(cache) as cached, without_timelines():  # no report of `trace` shows a timeline
            analysis = analyze(path or example_trace(), kind=kind, top_n=top_n,
                               workers=workers if pool is None else pool, ray_address=ray_address, capture=capture)
    for w in cached.warnings if cached is not None else ():  # a damaged or outdated cache, rebuilt
        note(f"warning: {w}")

    def text(console: Console) -> None:  # Rich is imported for text only
        from servescope.report.trace_text import render_trace

        render_trace(analysis, console, per_rank=per_rank)

    with timing(timings.add if timings is not None else None), stage("render"):
        if out.format == "json" and len(analysis.ranks) > 1:  # a rank folder: written one rank at a time
            from servescope.report.trace_json_pieces import trace_document_pieces

            out.emit({}, warnings=analysis.warnings, text=text, pieces=lambda: trace_document_pieces(analysis))
        elif out.format == "text":  # the text renderer reads the analysis, not the document
            out.emit({}, warnings=analysis.warnings, text=text)
        else:
            from servescope.report.trace_json import trace_document

            out.emit(trace_document(analysis), warnings=analysis.warnings, text=text)
    if timings is not None:
        click.echo(f"servescope: note: {timings.line()}", err=True)
