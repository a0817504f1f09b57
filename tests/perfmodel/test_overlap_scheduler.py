"""An engine that overlaps scheduling with execution (specs/data/engines/ overlap.enabled, by engine version) pays
the exposed share of its CPU time plus what of the rest its GPU step cannot hide:
step = GPU terms + f·cpu + max((1 − f)·cpu − GPU terms, 0), f = overlap_exposed_frac; others pay the sum."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_arrays
from servescope.specs.engines import engine

GPU_KEYS = ("gemm", "moe", "attention", "communication", "kernels")


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=1024, osl=256)


def test_every_engine_states_its_scheduler_by_version_with_a_source() -> None:
    for backend, version in (("vllm", "0.12.0"), ("vllm", "0.16.0"), ("sglang", "0.5.9"), ("trtllm", "1.2.0")):
        d = engine(backend, version).overlap
        assert isinstance(d.enabled, bool) and len(d.sources["enabled"]) > 40
    # vLLM turned async scheduling on by default in v0.14.0 (release notes, vllm#27614)
    assert not engine("vllm", "0.13.0").overlap.enabled and engine("vllm", "0.14.0").overlap.enabled
    assert "0.14.0" in engine("vllm", "0.16.0").overlap.sources["enabled"]


def test_a_version_outside_the_data_says_which_versions_are_known() -> None:
    old, odd = engine("vllm", "0.8.5"), engine("vllm", "nightly-abc")
    assert "0.10.0" in old.note and "0.14.0" in old.note and not old.overlap.enabled
    assert "not a release number" in odd.note and odd.overlap.enabled  # the newest entry
    assert engine("vllm", "").note == ""  # no version: the newest, said in provenance, not as a warning


def test_pipeline_parallel_turns_vllm_async_scheduling_off(sc: Scenario) -> None:
    new = sc.with_(engine_version="0.16.0")
    assert new.overlaps_cpu and not new.with_(pp=2).overlaps_cpu  # v0.14.0 notes: excludes pipeline parallel


@pytest.mark.parametrize("cpu_s", [1e-4, 2e-3, 5e-2])  # hidden entirely, partly, barely
def test_overlapped_cpu_shows_only_beyond_the_gpu_step(sc: Scenario, cpu_s: float) -> None:
    eff = Efficiency(cpu_overhead_s=cpu_s, cpu_overhead_per_seq_s=0.0)
    batch = np.array([1, 16, 256])
    for backend in ("trtllm", "vllm"):
        s = sc.with_(backend=backend, efficiency=eff, engine_version="1.2.0" if backend == "trtllm" else "0.12.0")
        a = step_arrays(s, batch, 2000, 1)
        gpu = sum(np.asarray(a[k]) for k in GPU_KEYS)
        want = np.maximum(gpu, cpu_s) if backend == "trtllm" else gpu + cpu_s
        np.testing.assert_allclose(a["step"], want, rtol=1e-12)
        np.testing.assert_allclose(a["cpu_raw"], cpu_s, rtol=1e-12)
        np.testing.assert_allclose(a["step"], gpu + a["cpu"], rtol=1e-12)  # the visible part adds up


def test_overlap_never_makes_a_step_slower(sc: Scenario) -> None:
    trt, vll = sc.with_(backend="trtllm"), sc.with_(backend="vllm", engine_version="0.12.0")
    for b in (1, 8, 64, 512):
        t, v = step_arrays(trt, b, 1500, 1), step_arrays(vll, b, 1500, 1)
        gpu_t = sum(float(np.ravel(t[k])[0]) for k in GPU_KEYS)
        assert float(np.ravel(t["step"])[0]) <= gpu_t + float(np.ravel(t["cpu_raw"])[0]) + 1e-15
        assert float(np.ravel(t["step"])[0]) >= gpu_t
        assert float(np.ravel(v["step"])[0]) == pytest.approx(
            sum(float(np.ravel(v[k])[0]) for k in GPU_KEYS) + float(np.ravel(v["cpu_raw"])[0]), rel=1e-12)


def test_an_exposed_share_of_the_cpu_time_stays_on_the_critical_path(sc: Scenario) -> None:
    """f = overlap_exposed_frac of the CPU time adds even when the GPU step is long; the rest only beyond it."""
    for cpu_s in (1e-4, 5e-2):
        eff = Efficiency(cpu_overhead_s=cpu_s, cpu_overhead_per_seq_s=0.0, overlap_exposed_frac=0.4)
        a = step_arrays(sc.with_(backend="trtllm", efficiency=eff), np.array([1, 64]), 2000, 1)
        gpu = sum(np.asarray(a[k]) for k in GPU_KEYS)
        np.testing.assert_allclose(a["step"], gpu + 0.4 * cpu_s + np.maximum(0.6 * cpu_s - gpu, 0.0), rtol=1e-12)
