"""Issue 29.6: the closed form and the simulation charge the same scheduling (host) cost between steps: both call
perfmodel.combine's host_cpu_s and exposed_host_s. Checked two ways: the simulation's host_s at the closed form's
own GPU time is the closed form's `cpu` term, and in a steady closed loop every decode step the simulation timed
leaves, after the closed form's GPU time at that step's batch and context, the closed form's host time."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.perfmodel import Scenario
from servescope.perfmodel.step import step_arrays
from servescope.simulate import build_workload, engine_for
from servescope.simulate.loop import simulate_raw
from servescope.simulate.stepcost import StepCost
from servescope.simulate.workload import Arrival

BASE = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=128, osl=48)


def _cf(sc: Scenario, b: int, ctx: int) -> tuple[float, float]:
    """(GPU seconds, host seconds) of the closed form's decode step of b sequences at ctx."""
    a = step_arrays(sc, b, ctx, 1)
    cpu, step = (float(np.ravel(a[k])[0]) for k in ("cpu", "step"))
    return step - cpu, cpu


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("b", [1, 16, 128])
def test_host_cost_is_the_closed_forms(backend: str, b: int) -> None:
    sc = BASE.with_(backend=backend)
    cost = StepCost(sc, engine_for(sc), 8192, 4096)
    gpu, cpu = _cf(sc, b, 700)
    assert float(cost.host_s(gpu, b)) == pytest.approx(cpu, rel=1e-12)
    # by hand: cpu(b) = c0 + c1·b; overlapped: f·cpu + max((1 − f)·cpu − gpu, 0)
    eff = sc.efficiency
    raw = eff.cpu_overhead_s + eff.cpu_overhead_per_seq_s * b
    f = eff.overlap_exposed_frac
    want = f * raw + max((1 - f) * raw - gpu, 0.0) if sc.overlaps_cpu else raw
    assert cpu == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_steady_closed_loop_charges_the_closed_forms_host_time(backend: str) -> None:
    sc = BASE.with_(backend=backend)
    b, isl, osl = 24, sc.isl, sc.osl
    wl = build_workload(Arrival("closed"), b, b, np.full(b, isl), np.full(b, osl))
    raw = simulate_raw(sc, engine_for(sc), wl)
    # one wave: a prefill step emits every first token, then osl − 1 decode steps of all b sequences, the j-th at
    # context isl + j − 1 (the closed form's context excludes the token the step computes)
    dec = raw.step_dur_s[-(osl - 1):]
    assert len(raw.step_dur_s) == osl and (raw.step_tokens[-(osl - 1):] == b).all()  # b tokens a step
    for j, dur in enumerate(dec, 1):
        gpu, cpu = _cf(sc, b, isl + j - 1)
        assert dur - gpu == pytest.approx(cpu, abs=1e-3 * dur)
