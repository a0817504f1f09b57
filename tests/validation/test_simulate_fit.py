"""perfmodel.simulate.fit: the TTFT surrogate, the grid fit, the stratified subsample and simulations of real rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from servescope.errors import ScenarioError
from servescope.perfmodel.efficiency import global_efficiency
from servescope.validation.simulate_fit import (
    PE_FINE,
    PE_GRID,
    SETUP_FINE,
    SimTask,
    fit_ttft,
    run_tasks,
    soft_l1,
    stratified_rows,
    surrogate_ttft_s,
)
from servescope.validation.simulate_rows import simulate_row
from servescope.validation.validate import Row, read_rows

DEV = Path(__file__).parents[1] / "data/validation/measured_serving_dev.csv"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return read_rows(DEV)


def test_surrogate_is_the_table_plus_setup_at_grid_points() -> None:
    table = np.array([[4.0, 3.0, 2.0, 1.5, 1.0], [0.5, 0.4, 0.3, 0.2, 0.1]])
    out = surrogate_ttft_s(table, np.asarray(PE_GRID), np.array([0.0, 0.05]))
    assert out.shape == (2, len(PE_GRID), 2)
    np.testing.assert_allclose(out[:, :, 0], table, rtol=1e-12)
    np.testing.assert_allclose(out[:, :, 1], table + 0.05, rtol=1e-12)
    # between grid points: linear in log-log, so a power law a / pe is reproduced exactly
    a = np.array([[2.0], [0.3]])
    law = a / np.asarray(PE_GRID)[None, :]
    mid = surrogate_ttft_s(law, np.array([0.45, 1.2]), np.array([0.0]))[:, :, 0]
    np.testing.assert_allclose(mid, a / np.array([0.45, 1.2])[None, :], rtol=1e-12)


def test_fit_recovers_known_numbers_from_a_power_law_table() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0.05, 3.0, size=(60, 1))  # seconds of prefill+queue at pe = 1
    table = a / np.asarray(PE_GRID)[None, :]
    pe_true, setup_true = float(PE_FINE[90]), float(SETUP_FINE[150])
    meas = (a[:, 0] / pe_true) + setup_true
    f = fit_ttft(table, meas)
    assert f.prefill_eff == pytest.approx(pe_true, rel=1e-9)
    assert f.prefill_overhead_s == pytest.approx(setup_true, rel=1e-9)
    assert f.objective < 1e-12 and f.rows == 60 and not f.at_bound


def test_fit_leaves_out_failed_rows_and_flags_a_bound() -> None:
    a = np.array([[1.0], [2.0], [0.5]])
    table = a / np.asarray(PE_GRID)[None, :]
    table[1, 2] = np.nan
    meas = a[:, 0] * 100.0  # far slower than any prefill_eff in bounds: the fit sits at the lower bound
    f = fit_ttft(table, meas)
    assert f.rows == 2
    assert "prefill_eff" in f.at_bound and f.prefill_eff == pytest.approx(float(PE_FINE[0]))
    with pytest.raises(ScenarioError):
        fit_ttft(table[1:2], meas[1:2])


def test_soft_l1_is_squared_near_zero_and_linear_far_out() -> None:
    assert float(soft_l1(np.array([1e-3]))[0]) == pytest.approx(1e-6, rel=1e-3)
    far = soft_l1(np.array([10.0, 20.0]))
    assert float(far[1] - far[0]) == pytest.approx(2 * 0.1 * 10.0, rel=1e-3)


def test_stratified_rows_keep_every_group(rows: list[Row]) -> None:
    sub = stratified_rows(rows, 8)
    modelled = [r for r in rows if r.scenario is not None]
    groups = {(r.model, r.system, r.backend) for r in modelled}
    assert {(r.model, r.system, r.backend) for r in sub} == groups
    counts: dict[tuple[str, str, str], int] = {}
    for r in modelled:
        k = (r.model, r.system, r.backend)
        counts[k] = counts.get(k, 0) + 1
    assert len(sub) <= sum(max(1, -(-n // 8)) for n in counts.values())
    assert len({r.id for r in sub}) == len(sub)


def test_run_tasks_match_direct_simulation_and_faster_prefill_is_not_slower(rows: list[Row]) -> None:
    r = next(x for x in rows if x.scenario is not None and x.concurrency == 4 and x.scenario.isl <= 1024
             and x.backend == "vllm")
    assert r.scenario is not None
    base = global_efficiency()
    slow, fast = replace(base, prefill_eff=0.3), replace(base, prefill_eff=1.2)
    out = run_tasks([SimTask(r.scenario, r.concurrency, slow), SimTask(r.scenario, r.concurrency, fast),
                     SimTask(r.scenario, r.concurrency, slow)])
    direct = simulate_row(replace(r.scenario, efficiency=slow), r.concurrency)
    assert out[0, 0] == pytest.approx(direct.tpot.mean_s, rel=1e-12)
    assert out[0, 1] == pytest.approx(direct.ttft.mean_s, rel=1e-12)
    np.testing.assert_array_equal(out[0], out[2])
    assert out[1, 1] < out[0, 1]


def test_fit_per_backend_setup_recovers_each_backends_setup() -> None:
    a = np.array([0.5, 1.0, 2.0, 0.7, 1.5, 3.0])
    table = a[:, None] / np.asarray(PE_GRID)[None, :]  # TTFT ∝ 1/prefill_eff
    be = ["vllm"] * 3 + ["trtllm"] * 3
    setup = np.array([0.03] * 3 + [0.15] * 3)
    pe = float(PE_FINE[90])  # a grid point, so the exact optimum is on the grid
    meas = a / pe + setup
    f = fit_ttft(table, meas, backends=be)
    assert f.prefill_eff == pytest.approx(pe, rel=1e-9)
    assert f.setup_for("vllm") == pytest.approx(0.03, rel=0.03)
    assert f.setup_for("trtllm") == pytest.approx(0.15, rel=0.03)
    assert f.setup_for("sglang") == f.prefill_overhead_s  # unseen backend: the median of the fitted ones
    one = fit_ttft(table, meas)  # one global set-up cannot fit both: a worse objective
    assert one.objective > f.objective and not one.setup_by_backend


def test_tpot_term_pulls_prefill_eff_toward_the_measured_tpot() -> None:
    a = np.array([0.5, 1.0, 2.0])
    grid = np.asarray(PE_GRID)
    ttft = a[:, None] / grid[None, :]
    tpot = 0.02 + 0.01 / grid[None, :] * np.ones((3, 1))  # slower prefill chunks slow the mixed steps
    lo, hi = float(PE_FINE[40]), float(PE_FINE[120])
    meas_ttft = a / lo + 0.03  # TTFT alone wants the low prefill_eff ...
    meas_tpot = np.full(3, 0.02 + 0.01 / hi)  # ... TPOT the high one
    alone = fit_ttft(ttft, meas_ttft)
    both = fit_ttft(ttft, meas_ttft, tpot=(tpot, meas_tpot))
    assert alone.prefill_eff == pytest.approx(lo, rel=1e-9)
    assert lo < both.prefill_eff <= hi


def test_fit_per_token_setup_recovers_a_setup_growing_with_the_prompt() -> None:
    from servescope.validation.simulate_fit import PER_TOKEN_FINE

    a = np.array([0.5, 1.0, 2.0, 0.7, 1.5, 3.0])
    isl = np.array([1024, 8192, 1024, 8192, 4096, 2048], dtype=float)
    table = a[:, None] / np.asarray(PE_GRID)[None, :]
    pe, b = float(PE_FINE[::2][45]), float(PER_TOKEN_FINE[12])
    setup = float(SETUP_FINE[::2][60])
    meas = a / pe + setup + b * isl
    f = fit_ttft(table, meas, isl=isl)
    assert f.setup_per_token_s == pytest.approx(b, rel=1e-9)
    assert f.prefill_eff == pytest.approx(pe, rel=1e-9)
    assert f.setup_for("vllm", 1000.0) == pytest.approx(setup + b * 1000.0, rel=1e-9)
    assert fit_ttft(table, a / pe + setup, isl=isl).setup_per_token_s == 0.0  # no growth in the data: b = 0
