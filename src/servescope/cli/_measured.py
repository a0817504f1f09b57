"""`--measured`: one declaration and one parse path for model, simulate, sweep, plan and report (issue 17).

A command adds `@measured_option` and turns its values into figures with `measured_figures` (typed figures and
benchmark result files: calibrate.inputs), then calibrates its scenario with `measured_fit` (calibrate.figure_fit)
or passes the figures on (plan and report: advise, which fits on a trace's calibration). How files were read and
what was set aside are notes, said after the result.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def measured_option(fn: F) -> F:
    """Add `--measured` (repeatable; a typed figure or a benchmark result file: calibrate.inputs)."""
    return click.option("--measured", "measured", multiple=True, cls=InputOption, help=MEASURED_HELP)(fn)


def measured_figures(values: Sequence[str]) -> tuple[Figure, ...]:
    """The figures of `--measured` values (calibrate.inputs.read_measured); how files were read is noted."""
    if not values:
        return ()
    from servescope.calibrate.inputs import read_measured

    inputs = read_measured(values)
    for n in inputs.notes:
        note(n)
    return inputs.figures


def measured_fit(sc: Scenario, figures: Sequence[Figure]) -> FigureFit | None:
    """The deployment calibrated on the figures (calibrate.figure_fit); None without figures. What was set aside
    is noted."""
    if not figures:
        return None
    from servescope.calibrate.figure_fit import fit_figures

    fit = fit_figures(sc, figures)
    for n in fit.notes:
        note(n)
    return fit
