"""The host dispatch of an eager decode step (perfmodel/graphs.py eager_host_s; issue 28, the cuda_graphs track):
the host issues every kernel one op at a time, the step takes max(GPU, host), a graph replay removes it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from servescope.errors import BadConfig
from servescope.perfmodel import graphs
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.ops import build_ops
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_arrays, step_parts
from servescope.specs import tables


def _llama(**kw: object) -> Scenario:
    args: dict[str, object] = {"isl": 128, "osl": 8, "backend": "sglang", "cuda_graphs": False, "check_memory": False}
    args.update(kw)
    return Scenario.build("llama-3.1-8b", "h100_sxm", **args)  # type: ignore[arg-type]


def _gpu_s(sc: Scenario, batch: int) -> float:
    """The step's GPU time alone: the step with no host dispatch, less its scheduler (cpu) time."""
    p = step_parts(sc, batch, sc.isl + sc.osl / 2.0, 1)
    a = combine_step(replace(p, host_dispatch_s=np.zeros_like(p.host_dispatch_s)), sc.efficiency)
    return float(np.ravel(a["step"])[0] - np.ravel(a["cpu"])[0])


def test_host_time_scales_with_the_op_count_and_vanishes_in_a_graph() -> None:
    t = graphs.host_s_per_kernel()
    one, two = (float(graphs.eager_host_s(n, 0.0, False, False)) for n in (400.0, 800.0))
    assert one == pytest.approx(400 * t) and two == pytest.approx(2 * one)
    assert float(graphs.eager_host_s(400.0, 1.0, False, False)) == 0.0  # replayed: one graph launch
    assert float(graphs.eager_host_s(400.0, 0.0, True, False)) == 0.0  # prefill chunk: GPU-bound, not priced
    assert float(graphs.eager_host_s(400.0, 0.0, False, True)) == 0.0  # graphs-on deployment: outside the domain


def test_the_per_kernel_cost_is_the_derivation_its_file_states() -> None:
    """t_kernel = gpt-fast's eager 25.5 tok/s step over the kernels its file counts (not a fitted number)."""
    d = tables.read_toml("eager_host.toml")["dispatch"]
    assert d["kernels_per_step"] == 32 * d["kernels_per_layer"] + 3 + 9 + 12
    assert d["host_us_per_kernel"] == pytest.approx(1e6 / 25.5 / d["kernels_per_step"], abs=0.05)


def test_host_bound_eager_step_is_the_host_time_and_the_gain_is_host_over_graph() -> None:
    eager = _llama()
    p = step_parts(eager, 1, eager.isl + eager.osl / 2.0, 1)
    host = float(np.ravel(p.host_dispatch_s)[0])
    gpu = _gpu_s(eager, 1)
    a = step_arrays(eager, 1, eager.isl + eager.osl / 2.0, 1)
    step, cpu = float(np.ravel(a["step"])[0]), float(np.ravel(a["cpu"])[0])
    assert host > gpu  # batch 1: ~0.4k kernels at tens of µs each outrun the 16 GB weight read
    assert step == pytest.approx(max(host, gpu) + cpu)
    graphed = replace(eager, cuda_graphs=True)
    g = float(np.ravel(step_arrays(graphed, 1, eager.isl + eager.osl / 2.0, 1)["step"])[0])
    assert step / g == pytest.approx((host + cpu) / g)
    assert step / g > 1.15  # the host-bound eager step is what the graph removes


def test_gpu_bound_eager_step_hides_the_dispatch() -> None:
    """At a large batch the GPU's work outlasts the same dispatch: the step is its GPU time."""
    eager = _llama(isl=4096, osl=512)
    b = 512
    p = step_parts(eager, b, eager.isl + eager.osl / 2.0, 1)
    host, gpu = float(np.ravel(p.host_dispatch_s)[0]), _gpu_s(eager, b)
    a = step_arrays(eager, b, eager.isl + eager.osl / 2.0, 1)
    assert gpu > host
    assert float(np.ravel(a["step"])[0]) == pytest.approx(gpu + float(np.ravel(a["cpu"])[0]))


def test_graphs_on_steps_carry_no_host_dispatch_even_beyond_the_capture_range() -> None:
    sc = _llama(cuda_graphs=True)
    beyond = max(sc.engine.graphs.capture_sizes) * 2
    p = step_parts(sc, np.array([1.0, float(beyond)]), 1000.0, 1)
    assert np.ravel(p.graphed).tolist() == [1.0, 0.0]
    assert not np.any(p.host_dispatch_s)


def test_every_tp_rank_dispatches_its_kernels_and_its_collective_calls() -> None:
    """t_host is one rank's: the same kernels per GPU at TP8 (its own process), plus one host op per collective."""
    t = graphs.host_s_per_kernel()
    one, eight = _llama(), _llama(tp=8)
    h1, h8 = (float(np.ravel(step_parts(s, 1, 500.0, 1).host_dispatch_s)[0]) for s in (one, eight))
    o8 = build_ops(eight)
    assert h1 == pytest.approx(build_ops(one).kernels_per_step * t)
    assert h8 - h1 == pytest.approx((o8.ar_per_step + 1) * t)  # the all-reduces and the logits gather


def test_a_measured_kernel_count_is_used_only_on_its_engine_and_model_family() -> None:
    assert graphs.measured_domain("vllm", "gpt_oss") == "vllm_graph_decode"
    assert graphs.measured_domain("sglang", "gpt_oss") is None  # another engine's kernels
    assert graphs.measured_domain("vllm", "llama") is None  # another architecture
    gpt = Scenario.build("gpt-oss-20b", "h100_sxm", backend="vllm", cuda_graphs=False, check_memory=False)
    n, why = graphs.eager_ops_per_step(gpt, 1.0)
    assert n == pytest.approx(434.0, abs=0.01) and "vllm_graph_decode" in why  # the trace's own 434 kernels
    n, why = graphs.eager_ops_per_step(_llama(), 382.0)
    assert n == 382.0 and "architecture" in why


def test_more_layers_more_host_time_at_batch_one() -> None:
    """The eager gain grows with the kernels per step where the GPU's time does not keep up (DeepSeek-V4 at TP8)."""
    v4 = Scenario.build("deepseek-v4-flash", "rtx_pro_6000_server", tp=8, isl=1024, osl=256, backend="sglang",
                        cuda_graphs=False, check_memory=False)
    h_v4 = float(np.ravel(step_parts(v4, 1, 1152.0, 1).host_dispatch_s)[0])
    h_l8 = float(np.ravel(step_parts(_llama(), 1, 132.0, 1).host_dispatch_s)[0])
    assert h_v4 > 2.5 * h_l8
    assert h_v4 > _gpu_s(v4, 1)  # host-bound


def test_a_bad_dispatch_table_names_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphs, "_doc", lambda: {"dispatch": {"host_us_per_kernel": "fast"}})
    with pytest.raises(BadConfig, match="eager_host.toml"):
        graphs.host_s_per_kernel()
    monkeypatch.setattr(graphs, "_doc", lambda: {"domain": {"x": {"engine": "vllm"}}})
    with pytest.raises(BadConfig, match=r"eager_host.toml \[domain.x\]"):
        graphs.measured_domain("vllm", "llama")
