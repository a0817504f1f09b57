"""An engine that overlaps scheduling with execution (data/engines.toml overlap_scheduler) pays only the CPU time
its GPU step cannot hide: step = GPU terms + max(cpu − GPU terms, 0); others pay the sum."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.graphs import engine_table, overlaps_cpu
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_arrays

GPU_KEYS = ("gemm", "moe", "attention", "communication", "kernels")


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=1024, osl=256)


def test_every_engine_states_its_scheduler_and_a_source() -> None:
    for backend in ("vllm", "sglang", "trtllm"):
        sec = engine_table()[backend]
        assert isinstance(sec["overlap_scheduler"], bool)
        assert len(str(sec["overlap_source"])) > 40
    assert overlaps_cpu("trtllm") and not overlaps_cpu("vllm")


@pytest.mark.parametrize("cpu_s", [1e-4, 2e-3, 5e-2])  # hidden entirely, partly, barely
def test_overlapped_cpu_shows_only_beyond_the_gpu_step(sc: Scenario, cpu_s: float) -> None:
    eff = Efficiency(cpu_overhead_s=cpu_s, cpu_overhead_per_seq_s=0.0)
    batch = np.array([1, 16, 256])
    for backend in ("trtllm", "vllm"):
        s = sc.with_(backend=backend, efficiency=eff)
        a = step_arrays(s, batch, 2000, 1)
        gpu = sum(np.asarray(a[k]) for k in GPU_KEYS)
        want = np.maximum(gpu, cpu_s) if backend == "trtllm" else gpu + cpu_s
        np.testing.assert_allclose(a["step"], want, rtol=1e-12)
        np.testing.assert_allclose(a["cpu_raw"], cpu_s, rtol=1e-12)
        np.testing.assert_allclose(a["step"], gpu + a["cpu"], rtol=1e-12)  # the visible part adds up


def test_overlap_never_makes_a_step_slower(sc: Scenario) -> None:
    trt, vll = sc.with_(backend="trtllm"), sc.with_(backend="vllm")
    for b in (1, 8, 64, 512):
        t, v = step_arrays(trt, b, 1500, 1), step_arrays(vll, b, 1500, 1)
        gpu_t = sum(float(np.ravel(t[k])[0]) for k in GPU_KEYS)
        assert float(np.ravel(t["step"])[0]) <= gpu_t + float(np.ravel(t["cpu_raw"])[0]) + 1e-15
        assert float(np.ravel(t["step"])[0]) >= gpu_t
        assert float(np.ravel(v["step"])[0]) == pytest.approx(
            sum(float(np.ravel(v[k])[0]) for k in GPU_KEYS) + float(np.ravel(v["cpu_raw"])[0]), rel=1e-12)
