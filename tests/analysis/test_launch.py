"""Launch geometry from a Kineto trace's grid/block args (analysis.launch), through the real reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servescope.analysis.launch import geometry, launches
from servescope.trace.load import load_trace


def _kernel(name: str, ts: float, dur: float, grid: list[int], block: list[int]) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": int(ts), "grid": grid, "block": block,
                     "registers per thread": 128, "shared memory": 99328, "est. achieved occupancy %": 6}}


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    events = [_kernel("_fused_gather_dequant_attn_kernel", 10.0 + 300 * i, 213.0, [1, 1, 1], [128, 1, 1])
              for i in range(3)]
    events += [_kernel("gemm_big", 250.0 + 300 * i, 20.0, [8, 50, 1], [256, 1, 1]) for i in range(3)]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA GeForce RTX 5090", "numSms": 170,
                                                      "maxThreadsPerMultiprocessor": 1536}],
           "traceEvents": events}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    return p


def test_grid_products_become_ctas_waves_and_busy_share(trace_path: Path) -> None:
    rows = {r.name: r for r in launches(load_trace(trace_path))}
    attn = rows["_fused_gather_dequant_attn_kernel"]
    assert (attn.calls, attn.ctas, attn.block_threads, attn.sms) == (3, 1, 128, 170)
    assert attn.median_us == pytest.approx(213.0)
    assert attn.waves == 1
    assert attn.busy_sm_share == pytest.approx(1 / 170)
    gemm = rows["gemm_big"]
    assert gemm.ctas == 400                      # 8 × 50 × 1
    assert gemm.waves == 3                       # ⌈400 / 170⌉
    assert gemm.busy_sm_share == pytest.approx(400 / 510)
    assert gemm.ctas_per_sm == pytest.approx(400 / 170)
    # longest total first: 3 × 213 µs before 3 × 20 µs
    assert [r.name for r in launches(load_trace(trace_path))][0] == "_fused_gather_dequant_attn_kernel"


def test_the_sm_count_given_is_used_only_when_the_trace_has_none(trace_path: Path) -> None:
    doc = json.loads(trace_path.read_text())
    del doc["deviceProperties"]
    trace_path.write_text(json.dumps(doc))
    assert {r.sms for r in launches(load_trace(trace_path))} == {None}
    assert {r.sms for r in launches(load_trace(trace_path), sms=188)} == {188}


def test_describe_names_the_grid_collapse() -> None:
    assert geometry(64, 188).describe() == "64 CTAs on 188 SMs: 34% of SMs busy"
    assert geometry(400, 170).describe() == "400 CTAs on 170 SMs over 3 waves: 78% of SMs busy"
    assert geometry(512, 256, resident_per_sm=2).waves == 1
    assert geometry(64, None).describe() == "64 CTAs"
