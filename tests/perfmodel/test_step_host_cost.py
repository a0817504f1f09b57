"""The MoE routing-kernel term of a decode step (perfmodel/moe_host.py) and its data file
(specs/data/step_host_cost.toml, written by data-build/measure_step_host_cost.py).

Expected values are computed here from the data file read with tomllib, the models' config.json layer counts, and a
recount of the bundled traces (tests/data/traces/tracelens, copies of the shared ones) with stdlib gzip + json and
kernel *names* only (the script goes through servescope's loader and classify stage).
"""

from __future__ import annotations

import gzip
import json
import statistics
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench_scripts import bench_script
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_parts

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces" / "tracelens"
DECODE = TRACES / "inference/vllm_decode_full/graph_execution.json.gz"
B200 = TRACES / "b200/eager_trace.json.gz"
DATA = tomllib.loads((ROOT / "src/servescope/specs/data/step_host_cost.toml").read_text(encoding="utf-8"))
# the routing kernels of each trace, by name (read from the traces: everything of the MoE layer but its norm, router
# GEMM and the two expert GEMMs; triton_kernels on MI300X, TRT-LLM-gen on B200)
DECODE_ROUTING = ("triton_poi_fused_constant_pad_nd_moe_forward", "_topk_forward", "_sum_bitmatrix_rows",
                  "_combined_routing_memset", "_combined_routing_compute", "_finalize_matmul_scatter")
B200_ROUTING = ("moe::dev::routing::", "moe::dev::finalize::")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.loads(f.read(), strict=False)["traceEvents"]


def _durations(path: Path, names: tuple[str, ...]) -> list[float]:
    return [float(e["dur"]) for e in _events(path)
            if e.get("cat") == "kernel" and any(n in e["name"] for n in names)]


def _per_layer_s(vendor: str) -> float:
    m = DATA["model"]
    return m["routing_kernels_per_moe_layer"] * m[f"routing_kernel_us_{vendor}"] * 1e-6


# ---- the data file against the traces -------------------------------------------------------------------------


def test_decode_trace_routing_kernels_recounted_by_name() -> None:
    d = _durations(DECODE, DECODE_ROUTING)
    t = DATA["trace"]["vllm_graph_decode"]
    assert len(d) == t["routing_kernels"] == 144  # 6 per layer x 24 layers (gpt-oss-20b: num_hidden_layers 24)
    assert t["moe_layers"] == 24 and DATA["model"]["routing_kernels_per_moe_layer"] == 144 / 24
    assert t["routing_kernel_median_us"] == pytest.approx(statistics.median(d), abs=1e-3)
    assert DATA["model"]["routing_kernel_us_amd"] == t["routing_kernel_median_us"]
    assert t["routing_kernel_min_us"] == pytest.approx(min(d), abs=1e-3)
    assert t["routing_us_per_moe_layer"] == pytest.approx(sum(d) / 24, rel=1e-5)
    assert 2.0 < statistics.median(d) < 10.0  # a few-µs floor, not a bandwidth-bound time


def test_b200_trace_routing_kernels_recounted_by_name() -> None:
    d = _durations(B200, B200_ROUTING)
    t = DATA["trace"]["vllm_eager_prefill_b200"]
    assert len(d) == t["routing_kernels"] == 4 * 36  # 3 routing + finalize per layer, gpt-oss-120b's 36 layers
    assert DATA["model"]["routing_kernel_us_nvidia"] == t["routing_kernel_median_us"]
    assert t["routing_kernel_median_us"] == pytest.approx(statistics.median(d), abs=1e-3)


def test_host_time_of_the_decode_step_recounted() -> None:
    ev = _events(DECODE)
    (ann,) = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    (launch,) = [e for e in ev if e["name"] == "hipGraphLaunch"]
    h = DATA["host"]["vllm_graph_decode"]
    assert h["execute_cpu_us"] == pytest.approx(ann["dur"], rel=1e-5)
    assert h["before_launch_us"] == pytest.approx(launch["ts"] - ann["ts"], abs=0.01)
    assert h["graph_launch_us"] == pytest.approx(launch["dur"], rel=1e-5)
    parts = h["before_launch_us"] + h["graph_launch_us"] + h["after_launch_us"]
    assert parts == pytest.approx(h["execute_cpu_us"], abs=0.01)


def test_data_file_is_what_the_script_computes_on_the_bundled_traces() -> None:
    text = bench_script("measure_step_host_cost").render(TRACES)
    assert text == (ROOT / "src/servescope/specs/data/step_host_cost.toml").read_text(encoding="utf-8")


# ---- the term in the step model ----------------------------------------------------------------------------------


def test_routing_term_by_hand_for_moe_models() -> None:
    # gpt-oss-120b: 36 layers, every one MoE; Qwen3-235B-A22B: 94 layers, every one MoE (config.json)
    for name, layers, kw in (("gpt-oss-120b", 36, {"tp": 1}), ("qwen3-235b-a22b", 94, {"tp": 8})):
        sc = Scenario.build(name, "h200_sxm", **kw)
        p = step_parts(sc, 8, 1024, 1)
        assert float(p.graphed) == 1.0
        assert float(p.routing_s) == pytest.approx(layers * _per_layer_s("nvidia"), rel=1e-12)
    # an AMD GPU takes the MI300X trace's duration
    sc = Scenario.build("gpt-oss-120b", "mi300x", tp=1)
    assert float(step_parts(sc, 8, 1024, 1).routing_s) == pytest.approx(36 * _per_layer_s("amd"), rel=1e-12)


def test_zero_for_a_dense_model() -> None:
    for name in ("llama-3.1-8b", "qwen3-32b"):
        p = step_parts(Scenario.build(name, "h200_sxm", tp=1), np.array([1, 8, 64]), 1024, 1)
        assert np.all(p.routing_s == 0.0)


def test_constant_in_batch_inside_the_graph_and_zero_when_eager() -> None:
    sc = Scenario.build("gpt-oss-120b", "h200_sxm", tp=1)
    top = int(max(sc.engine.graphs.capture_sizes))  # the engine record's largest captured decode batch
    b = np.array([1, 2, 7, 32, top, top + 1, 4 * top])
    p = step_parts(sc, b, 2048, 1)
    expect = np.where(b <= top, 36 * _per_layer_s("nvidia"), 0.0)  # eager steps hide it behind their launches
    np.testing.assert_allclose(p.routing_s, expect, rtol=1e-12)
    pf = step_parts(sc, 1, 0, 2048, prefill=True)  # a prefill chunk runs eagerly
    assert float(pf.routing_s) == 0.0


def test_overhead_and_step_grow_by_exactly_the_term() -> None:
    sc = Scenario.build("gpt-oss-120b", "h200_sxm", tp=1)
    p = step_parts(sc, np.array([1.0, 16.0, 64.0]), 2048, 1)
    p = replace(p, overlap=np.zeros_like(p.overlap))  # no CPU overlap: the step is the plain sum of its terms
    off = replace(p, routing_s=np.zeros_like(p.routing_s))
    a, b = combine_step(p, sc.efficiency), combine_step(off, sc.efficiency)
    np.testing.assert_allclose(a["overhead"] - b["overhead"], 36 * _per_layer_s("nvidia"), rtol=1e-9)
    np.testing.assert_allclose(a["step"] - b["step"], 36 * _per_layer_s("nvidia"), rtol=1e-9)
    for k in ("weights", "kv", "compute", "communication"):
        np.testing.assert_array_equal(a[k], b[k])


def test_a_measured_moe_curve_prices_the_routing_itself() -> None:
    sc = Scenario.build("gpt-oss-120b", "h200_sxm", tp=1)
    p = step_parts(sc, np.array([4.0]), 2048, 1)
    p = replace(p, moe_curve_s=np.full_like(p.routing_s, 1e-3))
    on, off = sc.efficiency.scaled(moe_curve=1.0), sc.efficiency.scaled(moe_curve=0.0)
    zero = replace(p, routing_s=np.zeros_like(p.routing_s))
    np.testing.assert_allclose(combine_step(p, on)["overhead"], combine_step(zero, on)["overhead"])
    assert float(combine_step(p, off)["overhead"][0] - combine_step(zero, off)["overhead"][0]) > 0.0
