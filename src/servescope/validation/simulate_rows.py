"""Validation rows predicted by the scheduler simulation instead of the closed form (`validate --simulate`).

What it does: for each modelled row of a validation CSV (validation.validate.read_rows: scenario + measured
concurrency), a closed-loop simulation at that concurrency with `waves` × concurrency requests (the benchmarks
behind the dev CSV send a multiple of the concurrency; 4 waves unless told otherwise) and fixed isl/osl (a row with
an `arrival` column: Poisson at its rate or a burst, capped at its concurrency; `with_arrivals` swaps such rows into
the closed form's result for `validate CSV`), under the
row's backend defaults (an engine without chunked prefill gets a step budget of at least isl + concurrency: the
measured server admitted each prompt next to a running batch, or its TTFT would be a whole drain); returns RowResults with the simulated mean TTFT and mean TPOT (the CSV's statistics), so
validation.validate's summaries apply unchanged. `stride` keeps every stride-th row (a quick look).
What it does not: refit the efficiencies for the simulation (they were fitted with the closed form's queueing
and interference terms, which the simulation replaces; simulate/fit.py fits prefill_eff and prefill_overhead_s
through the simulation and bench/crossval_simulate.py cross-validates that), or cross-validate (validation.crossval).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel.scenario import Scenario
from servescope.simulate import (
    Arrival,
    SimResult,
    build_workload,
    draw_lengths,
    engine_for,
)
from servescope.simulate.loop import simulate_raw
from servescope.simulate.metrics import per_request, summarise
from servescope.units import MS_PER_S
from servescope.validation.validate import DISAGG, Row, RowResult, ValidationResult, read_rows

# The client behind the dev CSV (InferenceX, ex-InferenceMAX, benchmark harness around `vllm bench serve` /
# benchmark_serving.py): `--max-concurrency c --request-rate inf --num-prompts 10·c --random-range-ratio 0.8
# --ignore-eos`. Recalled from SemiAnalysisAI/InferenceX benchmarks/benchmark_lib.sh (run_benchmark_serving) and
# its workflow inputs; not re-checked here (no network): bench/RESULTS.md reports the sensitivity to both numbers.
CLIENT_WAVES = 10  # num_prompts = 10 × concurrency
CLIENT_RANGE_RATIO = 0.8  # every prompt and output length drawn uniformly in [0.8·len, len]
MAX_PROMPTS = 2048  # requests simulated per row (at least 3 waves); the waves in between are reweighted


def simulate_row(sc: Scenario, concurrency: int, waves: int = CLIENT_WAVES, range_ratio: float = CLIENT_RANGE_RATIO,
                 max_prompts: int = MAX_PROMPTS, seed: int = 0, arrival: Arrival | None = None) -> SimResult:
    """The run that stands for one measured row (module docstring: client, engine budget): a closed loop at the
    row's concurrency, or the row's own `arrival` (Poisson at a rate or a burst, the concurrency its client cap).

    When waves × concurrency exceeds max_prompts, n = max(max_prompts, 3c) requests are simulated and the mean TTFT
    and TPOT of a closed loop reweighted to the full run's: the first c requests (sent at t = 0) and the last c (the
    drain) each weigh 1/waves, the ones between (the steady state) (waves − 2)/waves. A Poisson row simulates n
    requests as they come (no reweighting: its steady state has no waves); a burst row its N requests."""
    arrival = arrival or Arrival("closed")
    want = max(waves, 1) * concurrency
    n = min(want, max(max_prompts, 3 * concurrency))
    eng = engine_for(sc)
    if not eng.chunked_prefill:  # the row's server admitted prompts next to a running batch: budget ≥ isl + c
        eng = eng.with_(max_num_batched_tokens=max(eng.max_num_batched_tokens, sc.isl + concurrency))
    lengths = draw_lengths(arrival.burst or n, sc.isl, sc.osl, range_ratio, seed)
    wl = build_workload(arrival, n, concurrency, *lengths, seed=seed)
    raw = simulate_raw(sc, eng, wl)
    res = summarise(raw, {"concurrency": concurrency, "num_prompts": want, "simulated_prompts": wl.n,
                          "arrival": arrival.label()})
    if n == want or arrival.kind != "closed":
        return res
    per = per_request(raw)
    return replace(res, ttft=replace(res.ttft, mean_s=_wave_mean(per["ttft"], concurrency, waves)),
                   tpot=replace(res.tpot, mean_s=_wave_mean(per["tpot"], concurrency, waves)))


def _wave_mean(x: np.ndarray, c: int, waves: int) -> float:
    """Mean of a waves·c run from a shorter one (requests in send order): first and last c at 1/waves each."""
    first, mid, last = (float(np.nanmean(part)) for part in (x[:c], x[c:-c], x[-c:]))
    return (first + last + (waves - 2) * mid) / waves


def _simulated(r: Row, waves: int) -> RowResult:
    """One row simulated, with its own arrival when it has one (ScenarioError from the simulation)."""
    assert r.scenario is not None
    arrival = Arrival.parse(r.arrival) if r.arrival else None
    res = simulate_row(r.scenario, r.concurrency, waves, arrival=arrival)
    how = f"simulated ({arrival.label()})" if arrival is not None else "simulated"
    return RowResult(r.id, r.system, r.backend, r.model, r.concurrency, r.tpot_ms, r.ttft_ms,
                     res.tpot.mean_s * MS_PER_S, res.ttft.mean_s * MS_PER_S, how)


def simulate_rows(path: str | Path, waves: int = CLIENT_WAVES, stride: int = 1,
                  progress: Callable[[int, int], None] | None = None) -> ValidationResult:
    """Every modelled row simulated (`validate --simulate`), each with its own arrival when it has one."""
    rows = read_rows(path)[::stride]
    todo = [r for r in rows if r.scenario is not None]
    out: list[RowResult] = []
    skipped = [(r.id, r.reason) for r in rows if r.scenario is None]
    for i, r in enumerate(todo):
        try:
            out.append(_simulated(r, waves))
        except ScenarioError as e:
            skipped.append((r.id, f"simulation: {e}"))
            continue
        if progress is not None:
            progress(i + 1, len(todo))
    return ValidationResult(out, skipped, sum(1 for r in rows if r.reason != DISAGG))


def with_arrivals(path: str | Path, result: ValidationResult, waves: int = CLIENT_WAVES) -> ValidationResult:
    """`result` (the closed form's, `validate CSV`) with every row that carries an `arrival` simulated under it
    instead (audited benchmarks, MLPerf's server scenario, send Poisson traffic at a rate, not a closed loop): its
    predicted TPOT and TTFT the simulation's means, its 80 % range the closed form's scaled by the same ratio."""
    marked = {r.id: r for r in read_rows(path) if r.arrival and r.scenario is not None}
    if not marked:
        return result
    rows: list[RowResult] = []
    skipped = list(result.skipped)
    for rr in result.rows:
        r = marked.get(rr.id)
        if r is None:
            rows.append(rr)
            continue
        try:
            sim = _simulated(r, waves)
        except ScenarioError as e:
            skipped.append((r.id, f"simulation ({r.arrival}): {e}"))
            continue
        kt, kf = sim.pred_tpot_ms / rr.pred_tpot_ms, sim.pred_ttft_ms / rr.pred_ttft_ms
        rows.append(replace(sim, pred_tpot_ms_low=rr.pred_tpot_ms_low * kt, pred_tpot_ms_high=rr.pred_tpot_ms_high * kt,
                            pred_ttft_ms_low=rr.pred_ttft_ms_low * kf, pred_ttft_ms_high=rr.pred_ttft_ms_high * kf))
    return ValidationResult(rows, skipped, result.n_agg)
