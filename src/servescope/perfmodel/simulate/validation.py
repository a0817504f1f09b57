"""Validation rows predicted by the scheduler simulation instead of the closed form (`validate --simulate`).

What it does: for each modelled row of a validation CSV (perfmodel.validate.read_rows: scenario + measured
concurrency), a closed-loop simulation at that concurrency with `waves` × concurrency requests (the benchmarks
behind the dev CSV send a multiple of the concurrency; 4 waves unless told otherwise) and fixed isl/osl, under the
row's backend defaults (an engine without chunked prefill gets a step budget of at least isl + concurrency: the
measured server admitted each prompt next to a running batch, or its TTFT would be a whole drain); returns RowResults with the simulated mean TTFT and mean TPOT (the CSV's statistics), so
perfmodel.validate's summaries apply unchanged. `stride` keeps every stride-th row (a quick look).
What it does not: refit the efficiencies for the simulation (they were fitted with the closed form's queueing
and interference terms, which the simulation replaces; simulate/fit.py fits prefill_eff and prefill_overhead_s
through the simulation and bench/crossval_simulate.py cross-validates that), or cross-validate (perfmodel.crossval).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from servescope.errors import ScenarioError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.simulate import SimResult, engine_for, simulate
from servescope.perfmodel.validate import DISAGG, RowResult, ValidationResult, read_rows
from servescope.units import MS_PER_S

MAX_PROMPTS = 2048  # cap per row: a row at concurrency 1024 simulates two waves


def simulate_row(sc: Scenario, concurrency: int, waves: int = 4) -> SimResult:
    """The closed-loop run that stands for one measured row (module docstring: waves, engine budget)."""
    n = min(max(waves * concurrency, concurrency), MAX_PROMPTS)
    eng = engine_for(sc)
    if not eng.chunked_prefill:  # the row's server admitted prompts next to a running batch: budget ≥ isl + c
        eng = eng.with_(max_num_batched_tokens=max(eng.max_num_batched_tokens, sc.isl + concurrency))
    return simulate(sc, "closed", concurrency, n, engine=eng)


def simulate_rows(path: str | Path, waves: int = 4, stride: int = 1,
                  progress: Callable[[int, int], None] | None = None) -> ValidationResult:
    rows = read_rows(path)[::stride]
    todo = [r for r in rows if r.scenario is not None]
    out: list[RowResult] = []
    skipped = [(r.id, r.reason) for r in rows if r.scenario is None]
    for i, r in enumerate(todo):
        assert r.scenario is not None
        try:
            res = simulate_row(r.scenario, r.concurrency, waves)
        except ScenarioError as e:
            skipped.append((r.id, f"simulation: {e}"))
            continue
        out.append(RowResult(r.id, r.system, r.backend, r.model, r.concurrency, r.tpot_ms, r.ttft_ms,
                             res.tpot.mean_s * MS_PER_S, res.ttft.mean_s * MS_PER_S, "simulated"))
        if progress is not None:
            progress(i + 1, len(todo))
    return ValidationResult(out, skipped, sum(1 for r in rows if r.reason != DISAGG))
