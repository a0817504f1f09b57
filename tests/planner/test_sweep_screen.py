"""The grid sweep's two tiers (issue 30.4): the screen (planner.screen) against the full closed form, the near set
against a brute-force optimum, the memory budget's refusal, and the same output with the simulations on Ray.

Expected values come from the public model (`Scenario.build` at the point's layout, lengths and quantisation, then
`perfmodel.predict`), built here independently of the screen's configuration path; hand-worked sets for the
selection rules. No wall-clock assertion.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.cli._sweep_grid import ray_spread
from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario, predict
from servescope.planner import screen as screen_mod
from servescope.planner.screen import Grid, check_budget, grid_bytes, screen_grid
from servescope.planner.sweep import Sla
from servescope.planner.sweep_grid import classes, front_flags, grid_sweep, near_set, screen_error

MODEL, GPU = "qwen3-30b-a3b", "h100_sxm"  # MoE: EP layouts, attention-DP (the step reads the scenario's lengths)
# 7 ISLs and 6 OSLs with 5 anchors each: 2 and 1 held out; 450 concurrency is past the KV slots at long contexts
GRID = Grid(2, True, (1, 8, 64, 450), (128, 300, 512, 1000, 2048, 3000, 6000), (64, 200, 256, 1024, 1500, 4000),
            ("base", "fp8"))


@pytest.fixture(scope="module")
def base() -> Scenario:
    return Scenario.build(model=MODEL, gpu=GPU, tp=1)


@pytest.fixture(scope="module")
def screened(base: Scenario) -> screen_mod.Screened:
    return screen_grid(base, GRID)


def _exact(s: screen_mod.Screened, i: int) -> tuple[float, float, float]:
    """The point's TPOT, TTFT, output tok/s from a scenario built from names at its layout, lengths and scheme."""
    cfg, isl, osl, c = s.where(i)
    quant = {"base": "native"}.get(cfg.quant, cfg.quant)
    sc = Scenario.build(model=MODEL, gpu=GPU, tp=cfg.layout.tp, ep=cfg.layout.ep, dp=cfg.layout.dp, quant=quant,
                        isl=isl, osl=osl)
    p = predict(sc, [c])[0]
    return p.tpot_s, p.ttft_s, p.output_tok_s


def _screened(s: screen_mod.Screened, i: int) -> tuple[float, float, float]:
    return tuple(float(s.values[q][i]) for q in ("tpot_s", "ttft_s", "output_tok_s"))  # type: ignore[return-value]


def test_screen_is_the_closed_form_at_its_anchors(screened: screen_mod.Screened) -> None:
    idx = np.flatnonzero(screened.on_anchor)
    assert len(screened.configs) == 8  # TP1 DP2, TP1 EP2 DP2, TP2, TP2 EP2 × base, fp8: all fit 2 × 80 GB
    assert 0 < idx.size < screened.values["tpot_s"].size
    for i in idx[:: max(1, idx.size // 60)]:  # every 1 in ~60 anchor points, each configuration reached
        np.testing.assert_allclose(_screened(screened, int(i)), _exact(screened, int(i)), rtol=1e-9)


def test_screen_error_is_measured_on_the_held_out_points(screened: screen_mod.Screened) -> None:
    err = screen_error(screened, sample=10**6)  # every held-out point of both classes
    quantities = ("tpot_s", "ttft_s", "output_tok_s")
    for name, members in (("within_slots", ~screened.capped), ("past_slots", screened.capped)):
        held = np.flatnonzero(members & ~screened.on_anchor)
        assert err.sample[name] == held.size > 0
        rel = np.array([np.abs(np.array(_screened(screened, int(i))) / np.array(_exact(screened, int(i))) - 1.0)
                        for i in held])
        np.testing.assert_allclose([err.max_rel[name][q] for q in quantities], rel.max(axis=0), rtol=1e-9)
        assert rel.max() < 0.05  # the step's terms are near-affine between anchors: a few per cent at most
        assert all(err.margin[name][q] >= rel[:, k].max() for k, q in enumerate(quantities))
    assert set(err.sample) == {"within_slots", "past_slots"}  # no speculative setting: no speculative classes
    margins = err.at(classes(screened))
    assert margins["tpot_s"][screened.capped][0] == err.margin["past_slots"]["tpot_s"]


@pytest.mark.parametrize("front", [False, True])
def test_near_set_holds_the_true_optimum_of_every_workload(screened: screen_mod.Screened, base: Scenario,
                                                           front: bool) -> None:
    ttft_max, tpot_max = 0.5, 0.012
    sla = Sla(ttft_max_s=ttft_max, tpot_max_s=tpot_max)
    out = grid_sweep(base, GRID, sla, simulate_max=0, front=front)
    near = {(p.layout, p.quant, p.isl, p.osl, p.concurrency): p for p in out.points}
    n_pts = screened.values["tpot_s"].size
    assert 0 < len(near) < n_pts  # the screen rules points out
    best: dict[tuple[int, int], tuple[float, tuple[Any, ...]]] = {}
    exact = {}
    for i in range(n_pts):  # brute force: every point on the full closed form
        tpot, ttft, tok = exact[i] = _exact(screened, i)
        cfg, isl, osl, c = screened.where(i)
        if tpot <= tpot_max and ttft <= ttft_max and tok > best.get((isl, osl), (-1.0, ()))[0]:
            best[(isl, osl)] = (tok, (cfg.layout, cfg.quant, isl, osl, c))
    assert len(best) >= 10  # the SLA leaves most workloads a feasible point, not all
    for tok, key in best.values():
        p = near[key]  # type: ignore[index]
        assert p.sla_met and p.on_front and p.best
        assert p.output_tok_s == pytest.approx(tok, rel=1e-9)
    assert sum(p.best for p in out.points) == len(best)
    if front:  # every point of every workload's exact front within the SLA is near
        ok = [i for i in range(n_pts) if exact[i][0] <= tpot_max and exact[i][1] <= ttft_max]
        for w in {screened.where(i)[1:3] for i in ok}:
            members = [i for i in ok if screened.where(i)[1:3] == w]
            flags = front_flags(np.array([exact[i][2] for i in members]), np.array([1 / exact[i][0] for i in members]))
            for i, f in zip(members, flags, strict=True):
                cfg, isl, osl, c = screened.where(i)
                assert not f or near[(cfg.layout, cfg.quant, isl, osl, c)].on_front


def test_near_set_by_hand() -> None:
    # one workload, 2 GPUs, margin 10 % on every quantity; TPOT ≤ 20 ms
    tpot = np.array([0.010, 0.010, 0.019, 0.021, 0.030, 0.008])
    ttft = np.full(6, 0.1)
    tok = np.array([2000.0, 1500.0, 4000.0, 4400.0, 9000.0, 1000.0])  # per GPU: 1000, 750, 2000, 2200, 4500, 500
    m = dict.fromkeys(("tpot_s", "ttft_s", "output_tok_s"), 0.1)
    got = near_set({"tpot_s": tpot, "ttft_s": ttft, "output_tok_s": tok}, np.zeros(6, dtype=int), 2,
                   Sla(tpot_max_s=0.020), m, front=True)
    # may meet: TPOT/1.1 ≤ 20 ms → all but 30 ms (27.3 ms). Surely meets: TPOT/0.9 ≤ 20 ms → 10, 10, 8 ms.
    # point 1 (750/GPU ≤ 833 optimistic, user 110 optimistic) is dominated by point 0 pessimistic (909/GPU, 90/user)?
    # no: 90 < 110. Point 5 (500/GPU, 125·1.1 = 137.5/user optimistic) is not dominated (best pessimistic user
    # among surely-meeting points with more per GPU: 0.9/0.010 = 90). Nothing is dominated: every may-meet point.
    assert got.tolist() == [True, True, True, True, False, True]
    # same speed, more throughput: a surely-meeting point at 10 ms and 4000/GPU dominates points 0 and 1
    tok2, tpot2 = np.append(tok, 8000.0), np.append(tpot, 0.0099)
    got2 = near_set({"tpot_s": tpot2, "ttft_s": np.full(7, 0.1), "output_tok_s": tok2}, np.zeros(7, dtype=int), 2,
                    Sla(tpot_max_s=0.020), m, front=True)
    # new point pessimistic: 4000/1.1 = 3636/GPU, 0.9/0.0099 = 90.9/user; point 0 optimistic 1111/GPU, 110/user:
    # 90.9 < 110, kept. Point 2 (2000/GPU: optimistic 2222/GPU, 1.1/0.019 = 57.9/user) is dominated; point 3 too.
    assert got2.tolist() == [True, True, False, False, False, True, True]
    # in another workload the same new point dominates nothing of group 0
    got3 = near_set({"tpot_s": tpot2, "ttft_s": np.full(7, 0.1), "output_tok_s": tok2}, np.array([0] * 6 + [1]), 2,
                    Sla(tpot_max_s=0.020), m, front=True)
    assert got3.tolist() == [True, True, True, True, False, True, True]
    # the optimum's candidates (front=False): the best surely-meeting tok/s per GPU, pessimistic, is point 0's
    # 1000/1.1 = 909 (points 0, 1, 5 surely meet); a point stays if its optimistic figure (/0.9) is above it:
    # 1111, 833 (out), 2222, 2444, —, 556 (out)
    opt = near_set({"tpot_s": tpot, "ttft_s": ttft, "output_tok_s": tok}, np.zeros(6, dtype=int), 2,
                   Sla(tpot_max_s=0.020), m)
    assert opt.tolist() == [True, False, True, True, False, False]


def test_front_flags_by_hand() -> None:
    gpu = np.array([10.0, 10.0, 5.0, 12.0, 12.0, 3.0])
    user = np.array([5.0, 4.0, 6.0, 1.0, 1.0, 6.0])
    # (12, 1) twice: both kept (ties on both); (10, 5) kept; (10, 4) dominated by (10, 5); (5, 6) kept;
    # (3, 6) dominated by (5, 6)
    assert front_flags(gpu, user).tolist() == [True, False, True, True, True, False]


def test_grid_above_the_budget_is_refused_with_its_size_before_it_is_built(base: Scenario,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    big = Grid(8, True, tuple(range(1, 513)), tuple(range(100, 20100, 100)), tuple(range(50, 10050, 50)), ("base",))
    n_layouts = 8  # tp ∈ {1, 2, 4, 8}, ep ∈ {1, 8}
    size = n_layouts * 512 * 200 * 200
    assert big.size == size
    assert grid_bytes(big) > size * 8  # at least one float64 per point

    def never(*a: object, **k: object) -> None:
        raise AssertionError("the grid was built")

    monkeypatch.setattr(screen_mod, "configs", never)
    with pytest.raises(ScenarioError) as e:
        screen_grid(base, big, max_bytes=2.0 * 2**30)
    msg = str(e.value)
    assert f"{size:,} points" in msg and "MiB" in msg and "--max-grid-mib" in msg and "\n" not in msg
    check_budget(GRID, max_bytes=2.0 * 2**30)  # the small grid passes


def test_cli_grid_sweep_and_refusal() -> None:
    args = ["sweep", "--model", MODEL, "--gpu", GPU, "--gpus", "2", "--concurrency", "1,64", "--isls", "256,2048",
            "--osls", "128,1024", "--quants", "base,fp8", "--tpot-max", "15", "--simulate-max", "1"]
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema"] == "servescope.sweep_grid/2"
    assert doc["grid_points"] == 4 * 2 * 2 * 2 * 2 and doc["screened"] == doc["grid_points"]
    assert doc["simulated"] == 1 and sum("simulated" in p for p in doc["points"]) == 1
    assert all(p["tpot_ms"] <= 15 for p in doc["points"] if p["sla_met"])
    bad = CliRunner().invoke(main, [*args, "--max-grid-mib", "0.001"])
    assert bad.exit_code == 1
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and "64 points" in lines[0] and "--max-grid-mib" in lines[0]
    typo = CliRunner().invoke(main, [*args[:-4], "--quants", "base,fp9"])  # a typo, not a skipped layout
    assert typo.exit_code == 1 and typo.output.count("\n") == 1 and "'fp9'" in typo.output


def test_simulations_on_ray_give_the_same_sweep(base: Scenario) -> None:
    ray = pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    small = Grid(2, True, (1, 16, 128), (256, 2048), (128, 1024), ("base",))
    local = grid_sweep(base, small, Sla(tpot_max_s=0.015), simulate_max=3)
    assert not ray.is_initialized()
    try:
        on_ray = grid_sweep(base, small, Sla(tpot_max_s=0.015), simulate_max=3, spread=ray_spread("local"))
    finally:
        ray.shutdown()
    assert local.simulated == 3
    assert on_ray == local
