"""The `servescope.sweep_grid/1` document of a two-tier grid sweep (planner.sweep_grid) and its text rendering.
Presentation only: numbers are copied from the GridSweep and converted to ms through servescope.units.
What it does not: re-rank or filter points (the planner decided which are near, on the front and simulated)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servescope.report.simulate_doc import simulated_dict
from servescope.units import MS_PER_S

if TYPE_CHECKING:
    from rich.console import Console

    from servescope.planner.sweep_grid import GridPoint, GridSweep

SCHEMA = "servescope.sweep_grid/2"  # /2: the speculative axis (`spec`), `simulation_runs`, screen_error spec classes


def _point(p: GridPoint, n_gpus: int) -> dict[str, Any]:
    d: dict[str, Any] = {
        "layout": p.layout.label(), "tp": p.layout.tp, "ep": p.layout.ep, "dp": p.layout.dp, "quant": p.quant,
        "spec": p.spec, "isl": p.isl, "osl": p.osl, "concurrency": p.concurrency, "tok_s_per_gpu": p.output_tok_s / n_gpus,
        "tok_s_per_user": 1.0 / p.tpot_s, "tpot_ms": p.tpot_s * MS_PER_S, "ttft_ms": p.ttft_s * MS_PER_S,
        "output_tok_s": p.output_tok_s, "sla_met": p.sla_met, "on_front": p.on_front, "best": p.best,
        "screened": {"tpot_ms": p.screened_tpot_s * MS_PER_S, "ttft_ms": p.screened_ttft_s * MS_PER_S,
                     "output_tok_s": p.screened_output_tok_s}}
    if p.simulated is not None:
        d["simulated"] = simulated_dict(p.simulated)
    return d


def grid_document(gs: GridSweep) -> dict[str, Any]:
    """Axes, the screen's counts and measured error, the near points with the full closed form, the simulated."""
    g, e = gs.grid, gs.error
    sla = None if gs.sla is None else {
        "ttft_max_ms": None if gs.sla.ttft_max_s is None else gs.sla.ttft_max_s * MS_PER_S,
        "tpot_max_ms": None if gs.sla.tpot_max_s is None else gs.sla.tpot_max_s * MS_PER_S}
    return {
        "schema": SCHEMA, "n_gpus": g.n_gpus,
        "axes": {"layouts": [lay.label() for lay in g.layouts], "quant": list(g.quants),
                 "spec": [s.label() for s in g.specs], "isl": list(g.isl),
                 "osl": list(g.osl), "concurrency": list(g.concurrency)},
        "grid_points": g.size, "screened": gs.screened, "near": len(gs.points), "simulated": gs.simulated,
        "simulation_runs": gs.runs,
        "near_holds": "front" if gs.front else "optimum",
        "screen_error": {"sample": e.sample, "max_rel": e.max_rel, "p99_rel": e.p99_rel, "margin": e.margin},
        "sla": sla, "points": [_point(p, g.n_gpus) for p in gs.points], "skipped": list(gs.skipped),
        "notes": list(gs.notes),
    }


def render_grid(title: str, doc: dict[str, Any], console: Console, all_points: bool = False) -> None:
    """Counts and error, then each workload's optimum within the SLA (every front point with all_points)."""
    from rich.table import Table
    from rich.text import Text

    e = doc["screen_error"]
    console.print(f"[bold]{title}[/bold]: {doc['n_gpus']} GPUs, grid sweep in two tiers")
    names = {"tpot_s": "TPOT", "ttft_s": "TTFT", "output_tok_s": "tok/s"}
    errs = "; ".join(f"{c.replace('_', ' ')} ({e['sample'][c]:,} held out): "
                     + ", ".join(f"{names.get(q, q)} {v:.2%}" for q, v in e["max_rel"][c].items())
                     for c in e["max_rel"])
    what = "each workload's front" if doc["near_holds"] == "front" else "each workload's optimum"
    console.print(Text(f"{doc['screened']:,} points screened (of {doc['grid_points']:,}); the screen's largest error "
                       f"against the closed form, {errs}; {doc['near']:,} points within twice that of "
                       f"{what} (within the SLA) priced on the closed form; {doc['simulated']} simulated"))
    t = Table(box=None, pad_edge=False)
    for col in ("ISL", "OSL", "layout", "quant", "spec", "conc", "tok/s/GPU", "tok/s/user", "TPOT ms", "TTFT ms",
                "sim tok/s/GPU"):
        t.add_column(col, justify="left" if col in ("layout", "quant", "spec") else "right")
    for p in _shown(doc["points"], all_points):
        sim = p.get("simulated")
        t.add_row(str(p["isl"]), str(p["osl"]), p["layout"], p["quant"], p["spec"], str(p["concurrency"]),
                  f"{p['tok_s_per_gpu']:,.1f}", f"{p['tok_s_per_user']:,.1f}", f"{p['tpot_ms']:,.2f}",
                  f"{p['ttft_ms']:,.0f}", "" if sim is None else f"{sim['output_tok_s'] / doc['n_gpus']:,.1f}")
    console.print(t)
    for line in (*doc["skipped"], *doc["notes"]):
        console.print(Text(f"  {line}"))


def _shown(points: list[dict[str, Any]], all_points: bool) -> list[dict[str, Any]]:
    shown = [p for p in points if (p["on_front"] if all_points else p["best"])]
    return sorted(shown, key=lambda p: (p["isl"], p["osl"], -p["tok_s_per_gpu"]))
