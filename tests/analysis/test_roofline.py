"""Per-kernel work from the launching op's shapes and its roofline (issue 19 parts 1-3, analysis/roofline.py).

The target: FLOPs and bytes of every GEMM kernel with shapes in the shared traces equal an independent computation
from the raw `Input Dims`, parsed here with stdlib gzip+json (tests/independent.py), linked by plain dict scans
(kernel correlation -> launch -> External id -> the cpu_op with that id), never through servescope's parser.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from independent import DATA, raw_events
from servescope.analysis.breakdown import breakdown
from servescope.analysis.classify import classify
from servescope.analysis.roofline import (
    SHAPE_STATUSES,
    Peaks,
    WorkGroup,
    attach_work,
    attention_cost,
    curve_reference,
    gemm_cost,
    op_cost,
    roofline,
    tail_efficiency,
    w4a16_gemm_cost,
    waves,
)
from servescope.analysis.steps import find_steps
from servescope.trace import load_trace
from servescope.trace._shapes import SHAPED_OPS

TRACES = DATA / "traces"
SHAPED_TRACES = [p for p in sorted(TRACES.rglob("*.json*")) if p.suffix in (".gz", ".json")]
ELEM = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4}


def _expected_gemm(name: str, dims: list[Any], types: list[Any]) -> tuple[float, float] | None:
    """2·M·N·K and (M·K + K·N)·b + M·N·b of one GEMM op, straight from its raw args."""
    if name == "aten::mm":
        (m, k), (_, n), b = dims[0], dims[1], ELEM.get(types[0])
    elif name == "aten::addmm":
        (m, k), (_, n), b = dims[1], dims[2], ELEM.get(types[1])
    elif name in ("aten::linear", "vllm::rocm_unquantized_gemm", "aiter::gemm_a16w16"):
        m, k, n, b = math.prod(dims[0][:-1]), dims[0][-1], dims[1][0], ELEM.get(types[0])
    elif name == "aten::bmm":
        (bb, m, k), (_, _, n), b = dims[0], dims[1], ELEM.get(types[0])
        return 2.0 * bb * m * n * k, float(bb * ((m * k + k * n) * b + m * n * b))
    elif name == "aten::matmul" and len(dims[1]) == 2:
        m, k, n, b = math.prod(dims[0][:-1]), dims[0][-1], dims[1][1], ELEM.get(types[0])
    else:
        return None
    if b is None:
        return None
    return 2.0 * m * n * k, float((m * k + k * n) * b + m * n * b)


@functools.cache  # one parse per trace and worker: the parametrized test and the counts below read the same result
def _independent(path: Path) -> dict[int, tuple[float, float]]:
    """Per GEMM kernel (by correlation): its share of its op's FLOPs and bytes (∝ its duration among the op's
    kernels), from the raw JSON. Read only by its callers (cached)."""
    events = raw_events(path)
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and "correlation" in (e.get("args") or {})}
    ops = {}
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") in ("cpu_op", "Operator") and "External id" in a:
            ops.setdefault(a["External id"], e)
    per_op: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("cat") not in ("kernel", "Kernel"):
            continue
        a = e.get("args") or {}
        la = launch.get(a.get("correlation"))

        def ext_of(args: dict[str, Any]) -> Any:
            return args.get("External id", args.get("external id"))
        ext = ext_of(la["args"]) if la else ext_of(a)
        op = ops.get(ext)
        if op is None or la is not None and not op["ts"] <= la["ts"] <= op["ts"] + op["dur"]:
            continue
        per_op[ext].append(e)
    out = {}
    for ext, kernels in per_op.items():
        op = ops[ext]
        a = op["args"]
        if "Input Dims" not in a:
            continue
        cost = _expected_gemm(op["name"], a["Input Dims"], a.get("Input type") or [])
        if cost is None:
            continue
        total = sum(k["dur"] for k in kernels)
        for k in kernels:
            share = k["dur"] / total if total > 0 else 1 / len(kernels)
            out[k["args"]["correlation"]] = (cost[0] * share, cost[1] * share)
    return out


def _work(path: Path) -> pl.DataFrame:
    events = classify(load_trace(path).events)
    gpu, _ = attach_work(events, find_steps(events).gpu_events)
    return gpu


@functools.cache  # read at collection and again by test_the_shared_traces_have_shaped_gemms
def _has_dims(path: Path) -> bool:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return b'"Input Dims"' in f.read()


@pytest.mark.parametrize("path", [p for p in SHAPED_TRACES if _has_dims(p)], ids=lambda p: str(p.relative_to(TRACES)))
def test_gemm_flops_and_bytes_equal_an_independent_computation(path: Path) -> None:
    expected = _independent(path)
    gpu = _work(path)
    got = gpu.filter((pl.col("work_model") == "gemm") & (pl.col("kind") == "kernel"))
    got_by_corr = dict(zip(got["correlation"], zip(got["work_flops"], got["work_bytes"], strict=True), strict=True))
    assert set(got_by_corr) == set(expected)  # every GEMM kernel with shapes, and no other
    for corr, (flops, nbytes) in expected.items():
        assert got_by_corr[corr] == pytest.approx((flops, nbytes), rel=1e-12)


def test_the_shared_traces_have_shaped_gemms() -> None:
    counts = {p.relative_to(TRACES).as_posix(): len(_independent(p)) for p in SHAPED_TRACES if _has_dims(p)}
    assert counts["tracelens/b200/eager_trace.json.gz"] == 109
    assert counts["tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"] > 100
    assert sum(counts.values()) >= 300


def test_every_shaped_op_has_a_model_and_statuses_are_known() -> None:
    for name in SHAPED_OPS:
        assert op_cost(name, None, None).status == "no_dims"
    assert op_cost("vllm::moe_forward", "[[1, 2]]", '["float"]').status == "no_model"  # no expert weights among its inputs
    gpu = _work(TRACES / "tracelens/b200/eager_trace.json.gz")
    assert set(gpu["shape_status"].unique()) <= set(SHAPE_STATUSES)


# ------------------------------------------------------------------------------------------- malformed dims
def _trace(tmp_path: Path, dims: list[Any]) -> Path:
    """A tiny Kineto trace: one aten::mm op per entry of `dims`, each launching one kernel."""
    events: list[dict[str, Any]] = []
    for i, d in enumerate(dims):
        ts = 100.0 * i
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 50,
             "args": {"External id": i + 1, **({} if d is None else {
                 "Input Dims": d, "Input type": ["c10::BFloat16", "c10::BFloat16"]})}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts + 10,
             "dur": 5, "args": {"External id": i + 1, "correlation": 1000 + i}},
            {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": ts + 20, "dur": 10,
             "args": {"External id": i + 1, "correlation": 1000 + i, "device": 0, "stream": 7, "grid": [64, 1, 1],
                      "block": [128, 1, 1]}},
        ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
                                "traceEvents": events}))
    return path


def test_malformed_input_dims_leave_no_shape_and_are_counted(tmp_path: Path) -> None:
    good = [[64, 128], [128, 256]]
    bad = [[[64, 128]], [128, 256]], [[64, "128"], [128, 256]], [[-64, 128], [128, 256]], [[1 << 50, 128], [128, 256]]
    path = _trace(tmp_path, [good, *bad, "[[64, 128]]", [[64, 128], [129, 256]]])
    gpu = _work(path).sort("ts_us")
    assert gpu["shape_status"].to_list() == ["shaped", *["malformed"] * 6]
    assert gpu["work_flops"][0] == 2 * 64 * 256 * 128
    b = breakdown(load_trace(path))
    (w,) = [w for w in b.warnings if "malformed Input Dims" in w]
    assert w.startswith("6 kernels (60.0 µs) launched by 6 ops")


# ------------------------------------------------------------------------------------------- formulas
def test_cost_formulas() -> None:
    assert gemm_cost(888, 640, 2880, 2, 2) == (2 * 888 * 640 * 2880, (888 * 2880 + 2880 * 640) * 2 + 888 * 640 * 2)
    assert gemm_cost(16, 4096, 4096, 1, 2) == (2 * 16 * 4096 * 4096, (16 * 4096 + 4096 * 4096) * 1 + 16 * 4096 * 2)
    assert gemm_cost(4, 8, 8, 0.5, 2)[1] == (32 + 64) * 0.5 + 32 * 2  # FP4 0.5 B
    flops, nbytes = w4a16_gemm_cost(1, 4096, 4096, group_size=128)
    assert flops == 2 * 4096 * 4096 and nbytes == 4096 * 2 + 4096 * 4096 * 0.5 + 32 * 4096 * 2 + 4096 * 2
    flops, nbytes = attention_cost(8, 16, 4096, 4096, 128, 16, 2)
    assert flops == 4 * 8 * 16 * 4096 * 4096 * 128 and nbytes == 2 * 4 * 8 * 16 * 4096 * 128
    _, decode = attention_cost(32, 64, 1, 8192, 128, 8, 2)
    assert decode == 2 * (2 * 32 * 64 * 128 + 2 * 32 * 8 * 8192 * 128)  # Q+O, then the KV read


def test_waves_and_tail_efficiency() -> None:
    assert waves(64, 188) == pytest.approx(64 / 188)  # the sparse-decode kernel: a third of the SMs
    assert tail_efficiency(waves(64, 188)) == pytest.approx(64 / 188)
    assert waves(300, 148) == pytest.approx(300 / 148) and tail_efficiency(300 / 148) == pytest.approx(300 / 148 / 3)
    assert waves(296, 148, resident_blocks_per_sm=2) == 1.0 and tail_efficiency(1.0) == 1.0
    assert tail_efficiency(0.0) is None
    b = breakdown(load_trace(TRACES / "tracelens/b200/eager_trace.json.gz"))
    for k in b.kinds[0].top_kernels:
        if k.blocks_per_sm is not None:
            assert k.waves == k.blocks_per_sm  # grid ÷ SMs with one resident block per SM


def test_roofline_against_peaks() -> None:
    peaks = Peaks("x", {"bf16": 1e15}, 4e12, 100, "test")
    assert peaks.ridge_flops_per_byte("bf16") == 250.0 and peaks.ridge_flops_per_byte("fp32") is None
    compute = WorkGroup("gemm", "gemm", "bf16", 4096, 1, 1000.0, 5e11, 1e8)  # 500 µs at peak, 25 µs of HBM
    r = roofline([compute], peaks)
    assert r is not None and r.bound == "compute" and r.frac_of_peak == pytest.approx(0.5)
    assert r.achieved_flops_per_s == pytest.approx(5e14) and r.frac_of_achievable is None
    memory = WorkGroup("norm", "norm", None, None, 1, 10.0, 0.0, 2e7)  # 5 µs at 4 TB/s
    r = roofline([memory], peaks)
    assert r is not None and r.bound == "memory" and r.frac_of_peak == pytest.approx(0.5)
    assert roofline([WorkGroup("gemm", "gemm", "fp32", 8, 1, 10.0, 1e6, 1e3)], peaks).frac_of_peak is None  # no fp32 peak
    curve = Peaks("x", {"bf16": 1e15}, 4e12, 100, "test",
                  achievable=curve_reference(lambda m: 2.0, {"bf16": 1e15}, 4e12))
    r = roofline([compute], curve)
    assert r is not None and r.frac_of_achievable == pytest.approx(1.0)  # twice the roofline = the measured curve
    assert r.achievable_us == pytest.approx(1000.0)
    assert roofline([memory], curve).frac_of_achievable is None  # no measured reference for a norm
    assert roofline([], peaks) is None


def test_a_trace_without_shapes_reports_none_and_the_time_without(tmp_path: Path) -> None:
    b = breakdown(load_trace(_trace(tmp_path, [None, None, None])))  # record_shapes off
    (k,) = b.kinds
    assert k.work == () and all(t.shaped_calls == 0 and t.flops is None for t in k.top_kernels)
    assert k.unshaped_us == {"no_dims": 30.0} and k.top_kernels[0].no_shape == "no_dims"
    # A real trace without record_shapes: only copies (their own args.bytes) carry work; all kernel time is counted.
    b = breakdown(load_trace(TRACES / "hta/nccl_parser_config/nccl_data.json.gz"))
    for k in b.kinds:
        assert {g.model for g in k.work} <= {"memcpy", "memset"}
        total = sum(s.kernel_sum_us for s in b.steps if s.kind == k.kind)
        assert sum(k.unshaped_us.values()) + sum(g.dur_us for g in k.work) == pytest.approx(total, rel=1e-9)
