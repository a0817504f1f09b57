"""`servescope sweep --isls/--osls/--quants/--spec`: the grid sweep in two tiers (planner.sweep_grid), one library call
and one render; --all: every workload's Pareto front (its candidates to the closed form), else each one's optimum;
--simulate-max N|all, --workers N (processes) or --ray (Ray tasks) for the simulations.
What it does not: --measured (the calibrated restatement is per layout of the closed form's sweep)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from servescope.errors import ScenarioError

if TYPE_CHECKING:
    from collections.abc import Callable

    from servescope.cli._app import Output
    from servescope.perfmodel.scenario import Scenario
    from servescope.planner.sweep import Simulated
    from servescope.planner.sweep_sims import Spread


def grid_command(base: Scenario, n_gpus: int | None, concs: list[int], all_points: bool, ttft_max: float | None,
                 tpot_max: float | None, measured: tuple[str, ...], out: Output, opts: dict[str, Any]) -> None:
    from servescope.cli._scenario import _int_list
    from servescope.planner.screen import DEFAULT_MAX_GRID_MIB, Grid
    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep
    from servescope.planner.sweep_spec import parse_specs
    from servescope.report.sweep_grid_doc import grid_document, render_grid
    from servescope.report.titles import scenario_document, scenario_title
    from servescope.units import MIB, ms_to_s

    if measured:
        raise ScenarioError("sweep --measured does not combine with --isls/--osls/--quants (a grid sweep runs the "
                            "uncalibrated model)")
    n = n_gpus if n_gpus is not None else base.tp * base.dp
    quants = tuple(q.strip() for q in (opts["quants"] or "base").split(",") if q.strip())
    if not quants:
        raise click.BadParameter(f"expected comma-separated schemes, got {opts['quants']!r}", param_hint="--quants")
    grid = Grid(n, base.model.is_moe, tuple(concs), tuple(_int_list(opts["isls"] or str(base.isl))),
                tuple(_int_list(opts["osls"] or str(base.osl))), quants, parse_specs(opts["specs"]))
    sla = None
    if ttft_max is not None or tpot_max is not None:
        sla = Sla(None if ttft_max is None else ms_to_s(ttft_max), None if tpot_max is None else ms_to_s(tpot_max))
    mib = opts["max_grid_mib"] if opts["max_grid_mib"] is not None else DEFAULT_MAX_GRID_MIB
    sim_max = simulate_max(opts["simulate_max"])
    # --all shows each workload's whole front, so the closed form gets the front's candidates, not the optimum's
    spread = None if opts["ray_address"] is None else ray_spread(opts["ray_address"])
    gs = grid_sweep(base, grid, sla, max_bytes=mib * MIB, simulate_max=sim_max, front=all_points, spread=spread,
                    workers=opts["workers"] or 1)
    doc = grid_document(gs)
    doc["scenario"] = scenario_document(base)
    title = scenario_title(base, layout=False, backend=True, n_gpus=n)
    out.emit(doc, text=lambda console: render_grid(title, doc, console, all_points))


def simulate_max(text: str | None) -> int | None:
    """--simulate-max: a count ≥ 0, or "all" (None: every near point); default SIMULATE_MAX."""
    from servescope.planner.sweep_grid import SIMULATE_MAX

    if text is None:
        return SIMULATE_MAX
    if text.strip().lower() == "all":
        return None
    if not text.strip().isdigit():
        raise click.BadParameter(f"expected a count or 'all', got {text!r}", param_hint="--simulate-max")
    return int(text)


def ray_spread(address: str) -> Spread:
    """The simulations as Ray tasks at `address` ("local": a local Ray), analysis.ray_tasks's guarded start."""
    from servescope.analysis.ray_tasks import run_on_ray

    def spread(fn: Callable[[str, int], list[Simulated | str]], keys: list[str]) -> list[list[Simulated | str]]:
        return run_on_ray(fn, keys, 0, address)

    return spread
