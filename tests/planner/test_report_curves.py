"""Latency–throughput curves of a plan (planner/curves.py) against the perfmodel's own predict."""

from __future__ import annotations

import pytest

from servescope.perfmodel import Scenario, predict
from servescope.planner import plan
from servescope.planner.curves import plan_curves

CONCURRENCIES = [1, 2, 8, 64, 256]


def test_baseline_curve_is_the_model_tpot() -> None:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100", tp=1)
    points = predict(sc, CONCURRENCIES)
    base = plan_curves(plan(sc), CONCURRENCIES)[0]
    assert base.name == "baseline" and len(base.points) == len(points)
    for p, q in zip(points, base.points, strict=True):
        assert q.tpot_s == pytest.approx(p.tpot_s, rel=1e-9)
        assert q.batch == p.batch
        assert q.output_tok_s == pytest.approx(q.batch / q.tpot_s)  # decode throughput: batch per TPOT
        assert q.tok_s_per_user == pytest.approx(1.0 / p.tpot_s)
        assert q.tok_s_per_gpu == pytest.approx(q.output_tok_s / sc.n_gpus)
        assert 0.95 * q.output_tok_s < p.output_tok_s <= q.output_tok_s  # predict also charges TTFT


def test_each_paying_track_has_a_curve_and_the_combination_beats_baseline_at_its_concurrency() -> None:
    sc = Scenario.build(model="llama-3.1-70b", gpu="h100", tp=4)
    p = plan(sc, concurrency=8)
    curves = {c.name: c for c in plan_curves(p, CONCURRENCIES)}
    paying = [t.kind for t in p.tracks if t.pays]
    assert paying and set(paying) <= set(curves)
    at8 = {n: next(x for x in c.points if x.concurrency == 8) for n, c in curves.items()}
    for kind in paying:  # a track that pays on TPOT at concurrency 8 is faster there than the baseline
        assert at8[kind].tpot_s < at8["baseline"].tpot_s
    if len(p.combined.tracks) > 1:
        assert at8["combined"].tpot_s == pytest.approx(p.combined.outcome.tpot_s, rel=1e-9)
