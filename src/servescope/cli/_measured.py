"""`--measured`: one declaration and one parse path for model, simulate, sweep, plan and report (issue 17).

A command adds `@measured_option` and turns its values into figures with `measured_figures` (typed figures and
benchmark result files: calibrate.inputs), then calibrates its scenario with `measured_fit` (calibrate.figure_fit)
or passes the figures on (plan and report: advise, which fits on a trace's calibration). How files were read and
what was set aside are notes, said after the result. A result file whose run states another model, engine or GPU
count than the scenario (calibrate.inputs.identity_problems) is refused in one line naming the file and the field
with both values, unless `--force` (added with `--measured`), and then said in a note.
A file that reads as Prometheus text (a scrape of the engine's /metrics: validation.metrics) becomes typed figures
here (`metrics_figures`): tpot from the ITL histogram's mean, ttft from the TTFT histogram's mean, at the
concurrency the running-requests gauge shows at the scrape (vllm:num_requests_running / sglang:num_running_reqs),
with the mean request lengths when the scrape has them; each figure's source names the file and the series.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from servescope.cli._app import F, InputOption, note

if TYPE_CHECKING:
    from servescope.calibrate.figure_fit import FigureFit
    from servescope.calibrate.figures import Figure
    from servescope.perfmodel import Scenario

MEASURED_HELP = ("What you measured, repeatable, combinable with a trace: a typed figure (tpot=12.1ms@c1, "
                 "output=1536tok/s@c128,isl=1024,osl=1024, ttft=340ms@c1, allreduce_share=0.515@c1; a noise after "
                 "±: tpot=12.1ms±3%@c1) or a benchmark result file (vllm bench serve --save-result JSON, "
                 "sglang.bench_serving JSONL). Sets the deployment's decode levels (one TPOT: the level; two "
                 "concurrencies: fixed vs per-batch cost) and the collective or class time a share identifies, "
                 "and says which input set which knob.")


_FORCE, _IDENTITIES = "servescope.measured.force", "servescope.measured.identities"


def _keep_force(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.meta[_FORCE] = bool(value)
    return value


def measured_option(fn: F) -> F:
    """Add `--measured` (repeatable; a typed figure or a benchmark result file: calibrate.inputs) and `--force`
    (use result files of another model, engine or GPU count; kept in the click context, no parameter)."""
    fn = click.option("--force", is_flag=True, expose_value=False, callback=_keep_force,
                      help="Calibrate on --measured result files even when their model_id, backend or GPU count "
                           "differ from the scenario (each difference is said).")(fn)
    return click.option("--measured", "measured", multiple=True, cls=InputOption, help=MEASURED_HELP)(fn)


def measured_figures(values: Sequence[str], scenario: Scenario | None = None) -> tuple[Figure, ...]:
    """The figures of `--measured` values (calibrate.inputs.read_measured); how files were read is noted. With
    `scenario`, the files are checked against it (`check_measured`)."""
    if not values:
        return ()
    from servescope.calibrate.inputs import read_measured
    from servescope.validation.metrics import looks_like_metrics

    scrapes = [v for v in values if "=" not in v and Path(v).is_file() and looks_like_metrics(v)]
    from_scrapes = tuple(f for v in scrapes for f in metrics_figures(v))
    values = [v for v in values if v not in scrapes]
    if not values:
        return from_scrapes
    inputs = read_measured(values)
    for n in inputs.notes:
        note(n)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_IDENTITIES] = inputs.identities
    if scenario is not None:
        check_measured(scenario)
    return from_scrapes + inputs.figures


def metrics_figures(path: str) -> list[Figure]:
    """Typed figures of a /metrics scrape (module docstring); MeasurementError in one line when it has no running
    requests to state a concurrency, or neither an ITL nor a TTFT histogram."""
    from servescope.calibrate.figures import Figure
    from servescope.errors import MeasurementError
    from servescope.units import s_to_ms
    from servescope.validation.metrics import read_metrics

    m = read_metrics(path)
    if m.running is None or m.running < 1:
        gauge = m.series.get("running", "no vllm:num_requests_running / sglang:num_running_reqs")
        raise MeasurementError(f"{path}: no running requests at the scrape ({gauge}: {m.running}); scrape during "
                               "the run to state its concurrency")
    c = max(1, round(m.running))
    isl = None if m.mean_isl is None else max(1, round(m.mean_isl))
    osl = None if m.mean_osl is None else max(1, round(m.mean_osl))
    lengths = "" if isl is None or osl is None else f",isl={isl},osl={osl}"
    out = []
    for metric, boundary in (("tpot", "itl"), ("ttft", "ttft")):
        b = m.boundaries.get(boundary)
        if b is None or not b.mean_s > 0:
            continue
        out.append(Figure(metric, b.mean_s, c, isl if lengths else None, osl if lengths else None,
                          f"{metric}={s_to_ms(b.mean_s):.4g}ms@c{c}{lengths}",
                          source=f"{path} ({b.series} mean of {b.count:g}; concurrency {c} from "
                                 f"{m.series['running']} at the scrape)"))
    if not out:
        raise MeasurementError(f"{path}: neither an inter-token latency nor a time-to-first-token histogram with "
                               "observations (vllm:inter_token_latency_seconds, vllm:time_to_first_token_seconds)")
    note(f"{path}: " + ", ".join(f.text for f in out) + f" (means of the {m.engine} histograms; concurrency from "
         f"{m.series['running']} at the scrape)")
    return out


def check_measured(sc: Scenario) -> None:
    """Refuse result files whose runs state another model, engine or GPU count than `sc` (MeasurementError, one
    line naming the file and the field with both values); with --force, say each difference in a note."""
    from servescope.calibrate.inputs import identity_problems
    from servescope.errors import MeasurementError

    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    problems = identity_problems(ctx.meta.pop(_IDENTITIES, ()), sc)
    if problems and not ctx.meta.get(_FORCE):
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise MeasurementError(f"{problems[0]}{more}; --force calibrates on it anyway")
    for p in problems:
        note(f"{p}: used anyway (--force)")


def measured_fit(sc: Scenario, figures: Sequence[Figure]) -> FigureFit | None:
    """The deployment calibrated on the figures (calibrate.figure_fit), the result files checked against `sc`
    first (`check_measured`); None without figures. What was set aside is noted."""
    if not figures:
        return None
    from servescope.calibrate.figure_fit import fit_figures

    check_measured(sc)

    fit = fit_figures(sc, figures)
    for n in fit.notes:
        note(n)
    return fit
