"""GEMM efficiency vs M from real traces (bench/measure_gemm_efficiency.py) and its use in the step model
(perfmodel/gemm_curve.py).

The extraction is checked against an independent linkage: stdlib json, each GEMM kernel tied to its launch by
correlation and to the innermost aten::addmm/mm whose CPU interval holds the launch (time containment, not the
External id the bench script uses), FLOPs by hand as 2·M·N·K.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench_scripts import bench_script
from servescope.perfmodel import gemm_curve
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import decode_step, step_arrays
from servescope.specs.hardware import load_gpu

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
B200 = TRACES / "tracelens/b200/eager_trace.json.gz"
SGLANG = TRACES / "tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
GPT_OSS_20B = ROOT / "tests" / "data" / "planner" / "openai--gpt-oss-20b_config.json"


def _bench():  # type: ignore[no-untyped-def]
    return bench_script("measure_gemm_efficiency")


def _by_interval(path: Path) -> list[tuple[int, int, int, float]]:
    """(M, N, K, dur_us) per GEMM kernel: launch by correlation, op by interval containment on the launch thread."""
    with gzip.open(path, "rt") as f:
        ev = json.loads(f.read(), strict=False)["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::addmm", "aten::mm")]
    out = []
    for k in ev:
        if k.get("cat") != "kernel" or not k["name"].startswith(("nvjet", "Cijk_")):
            continue
        la = launches[k["args"]["correlation"]]
        holding = [o for o in ops if o["tid"] == la["tid"] and o["ts"] <= la["ts"] <= o["ts"] + o["dur"]]
        op = min(holding, key=lambda o: o["dur"])  # innermost
        a, b = [d for d in op["args"]["Input Dims"] if len(d) == 2][:2]  # bias is 1-d; alpha/beta are []
        out.append((a[0], b[1], a[1], float(k["dur"])))
    return out


def test_b200_extraction_matches_interval_linkage():
    got = _bench().extract(B200)
    hand = _by_interval(B200)
    assert len(got) == len(hand) == 109
    assert Counter((g.m, g.n, g.k) for g in got) == Counter((m, n, k) for m, n, k, _ in hand)
    assert sum(g.dur_us for g in got) == pytest.approx(sum(d for *_, d in hand))
    assert sum(g.flops for g in got) == pytest.approx(sum(2.0 * m * n * k for m, n, k, _ in hand))
    # the logits GEMM of the last prompt token: M=1, vocab 201088/8 = 25136 on this TP=8 rank, hidden 2880
    lm = [g for g in got if g.m == 1]
    assert [(g.n, g.k, g.dtype) for g in lm] == [(25136, 2880, "bf16")]
    mem_s = (1 * 2880 + 2880 * 25136 + 25136) * 2 / 7.7e12  # bytes / B200 datasheet 7.7 TB/s (specs b200_sxm)
    assert _bench().roofline_s(lm[0]) == pytest.approx(mem_s)  # M=1 is bandwidth-bound: 2·M·N·K/2.25e15 is tiny


def test_sglang_prefill_point_by_hand():
    b = _bench()
    got = [g for g in b.extract(SGLANG) if g.m == 15360]
    hand = [x for x in _by_interval(SGLANG) if x[0] == 15360]
    assert len(got) == len(hand) == 144
    flops = sum(2.0 * m * n * k for m, n, k, _ in hand)
    dur_s = sum(d for *_, d in hand) * 1e-6
    tflops = flops / dur_s / 1e12
    pt = next(p for p in b.curve_points(b.extract(SGLANG))["mi300x"] if p["m"] == 16384)
    assert pt["achieved_tflops"] == pytest.approx(tflops, abs=0.1)
    assert pt["ratio"] == pytest.approx(1307.4e12 / (flops / dur_s), rel=1e-3)  # compute-bound: peak / achieved


def test_shipped_file_is_what_the_bench_writes():
    b = _bench()
    kernels = []
    for rel, gpu, _ in b.CASES:
        if (TRACES / rel).is_file():
            kernels += b.extract(TRACES / rel, gpu)
    text = b.to_toml(b.curve_points(kernels), b.regimes(kernels), b.coverage(kernels))
    shipped = (ROOT / "src/servescope/specs/data/gemm_efficiency.toml").read_text(encoding="utf-8")
    assert text == shipped


def test_curve_limits_and_monotone_between():
    c = gemm_curve.curve_for(load_gpu("mi300x"))
    assert c is not None and c.measured_on == "mi300x"
    m = np.array([1, 8, c.mem_m_max, 100, 1000, c.comp_m_min, 1e6])
    r = c.ratio(m)
    assert r[0] == r[1] == r[2] == pytest.approx(c.mem_ratio)
    assert r[-1] == r[-2] == pytest.approx(c.comp_ratio)
    assert np.all(np.diff(r) * math.copysign(1.0, c.comp_ratio - c.mem_ratio) >= -1e-12)
    mid = math.sqrt(c.mem_m_max * c.comp_m_min)  # log-M midpoint
    assert float(c.ratio(np.array([mid]))[0]) == pytest.approx((c.mem_ratio + c.comp_ratio) / 2)


def test_model_gemm_time_on_curve_is_roofline_times_ratio_and_monotone():
    sc = Scenario.build(str(GPT_OSS_20B), "mi300x", tp=1, cuda_graphs=False)
    b = np.array([1, 2, 4, 16, 64, 256, 1024, 4096, 16384, 65536])
    a = step_arrays(sc, b, 1000, 1)
    assert np.all(np.diff(a["gemm"]) >= -1e-15)  # more rows never make the dense GEMMs faster
    g = sc.gpu
    c = gemm_curve.curve_for(g)
    assert c is not None
    off = sc.with_(efficiency=sc.efficiency.scaled(gemm_curve=0.0))
    p_off = step_arrays(off, b, 1000, 1)
    assert not np.allclose(a["gemm"], p_off["gemm"])  # the curve is in use
    ideal = sc.with_(efficiency=sc.efficiency.scaled(gemm_curve=0.0, gemm_bw_eff=1.0, compute_eff=1.0))
    hbm_frac = g.hbm_bw_efficiency or 0.8  # achieved / datasheet BW (ops.achieved_bw_bytes_per_s)
    roof = step_arrays(ideal, b, 1000, 1)["gemm"]  # max(bytes / achieved BW, FLOPs / peak), no efficiency
    small = b <= c.mem_m_max  # bandwidth-bound end: bytes / datasheet BW × mem_ratio
    assert a["gemm"][small] == pytest.approx(roof[small] * hbm_frac * c.mem_ratio, rel=1e-9)
    big = b >= 4 * c.comp_m_min  # compute-bound end: FLOPs / peak × comp_ratio
    assert a["gemm"][big] == pytest.approx(roof[big] * c.comp_ratio, rel=1e-9)


def test_gpu_without_curve_is_unchanged_and_says_so():
    sc = Scenario.build(str(GPT_OSS_20B), "h200_sxm", tp=1)
    off = sc.with_(efficiency=sc.efficiency.scaled(gemm_curve=0.0))
    assert decode_step(sc, 32, 2000).step_time_s == decode_step(off, 32, 2000).step_time_s
    assert "no measured GEMM curve" in gemm_curve.describe(sc.gpu)
    assert "one regime only" in gemm_curve.describe(load_gpu("b200_sxm"))  # one kernel at M=1: not a curve


def test_transfer_within_family_only(monkeypatch):
    table = {"b200_sxm": {"mem_ratio": 1.5, "mem_m_max": 8, "comp_ratio": 2.0, "comp_m_min": 4096,
                          "mem_kernels": 3, "comp_kernels": 5, "source": "synthetic"}}
    monkeypatch.setattr(gemm_curve, "_table", lambda: table)
    gemm_curve._curve_by_name.cache_clear()
    try:
        b300 = gemm_curve.curve_for(load_gpu("b300_sxm"))  # sm_103: same family as sm_100
        assert b300 is not None and b300.measured_on == "b200_sxm"
        assert "transferred from b200_sxm" in gemm_curve.describe(load_gpu("b300_sxm"))
        assert gemm_curve.curve_for(load_gpu("rtx_pro_6000_server")) is None  # sm_120, GDDR7: another family
        assert gemm_curve.curve_for(load_gpu("h200_sxm")) is None
    finally:
        gemm_curve._curve_by_name.cache_clear()
