"""Kernel tuning headroom (issue 19 part 4, analysis/headroom.py): kernels at ≥ 2× the measured reference at their
shape, and "no gain from tuning" on a real trace whose kernels run at their measured curve.

The reference is recomputed here from the shipped data files read with tomllib (the MI300X datasheet and the dense-GEMM
curve measured on it), never through servescope's specs or perfmodel."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from independent import DATA
from servescope.advise import analyze, kernel_evidence
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.headroom import HEADROOM_MIN

SPECS = Path(__file__).parents[2] / "src/servescope/specs/data"
SGLANG = DATA / "traces/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"


def mi300x_reference_us(m: int, n: int, k: int) -> float:
    """max(2MNK / bf16 peak, bytes / HBM) × the measured ratio at M (M ≤ mem_m_max: the memory-side ratio)."""
    gpu = tomllib.loads((SPECS / "gpus/mi300x.toml").read_text())
    curve = tomllib.loads((SPECS / "gemm_efficiency.toml").read_text())["mi300x"]
    assert m <= curve["mem_m_max"]
    roof = max(2 * m * n * k / (gpu["flops"]["bf16"]["value_tflops"] * 1e12),
               (m * k + k * n + m * n) * 2 / (gpu["hbm_bw"]["value_tb_per_s"] * 1e12))
    return roof * curve["mem_ratio"] * 1e6


def decode_trace(tmp_path: Path, kernels: list[tuple[str, list[list[int]], float]], layers: int = 4,
                 gpu: str = "AMD Instinct MI300X") -> Path:
    """A decode step of `layers` layers, each running the (kernel name, aten::mm Input Dims, µs) list in order."""
    events: list[dict[str, Any]] = [{"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0,
                                     "dur": 1e6, "name": "execute_context_0(0)_generation_32(32)"}]
    t, ext = 10.0, 0
    for _ in range(layers):
        for name, dims, dur in kernels:
            ext += 1
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": 8,
                 "args": {"External id": ext, "Input Dims": dims, "Input type": ["c10::BFloat16"] * 2}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                 "dur": 5, "args": {"External id": ext, "correlation": 1000 + ext}},
                {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 2, "dur": dur,
                 "args": {"External id": ext, "correlation": 1000 + ext, "device": 0, "stream": 7,
                          "grid": [304, 1, 1], "block": [256, 1, 1]}},
            ]
            t += dur + 3
    path = tmp_path / "decode.json"
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": gpu, "numSms": 304}], "traceEvents": events}))
    return path


SLOW = ("slow_gemm", [[32, 4096], [4096, 4096]], 50.0)  # ~5× its reference
FAIR = ("fair_gemm", [[32, 4096], [4096, 1024]], 4.0)  # ~1.5× its reference


def test_a_kernel_at_5x_its_reference_is_named_with_its_saving(tmp_path: Path) -> None:
    a = analyze(decode_trace(tmp_path, [SLOW, FAIR]))
    (f,) = [f for f in a.findings if f.code == "kernel_headroom"]
    ref_slow, ref_fair = mi300x_reference_us(32, 4096, 4096), mi300x_reference_us(32, 1024, 4096)
    assert 50.0 / ref_slow > HEADROOM_MIN > 4.0 / ref_fair  # the premise: one slow, one fair
    assert f.evidence["top_kernel"] == "slow_gemm" and f.evidence["tunable_kernels"] == 1
    assert f.evidence["top_achievable_us"] == pytest.approx(4 * ref_slow, rel=1e-9)
    assert f.evidence["saved_us"] == pytest.approx(4 * (50.0 - ref_slow), rel=1e-9)
    assert f.evidence["saved_us"] <= f.evidence["top_measured_us"]  # never more than the kernel's own time
    assert f.mitigations == ("kernel_tuning",) and f.severity == "high"  # ~4×40 µs of ~216 µs busy
    ev = kernel_evidence(a)
    slow = next(r for r in ev.rows if r.name == "slow_gemm")
    assert slow.tunable and slow.saved_us == pytest.approx(f.evidence["saved_us"])
    assert not next(r for r in ev.rows if r.name == "fair_gemm").tunable


def test_no_gain_on_a_real_trace_whose_kernels_run_at_their_curve() -> None:
    """The SGLang MI300X prefill: its GEMMs are the ones the MI300X curve was measured on."""
    a = analyze(SGLANG)
    (f,) = [f for f in a.findings if f.code == "kernel_headroom"]
    assert f.severity == "info" and f.message.startswith("no gain from tuning")
    assert f.evidence["kernels_with_reference"] == 3 and f.evidence["worst_headroom"] < HEADROOM_MIN
    assert f.evidence["achievable_us"] == pytest.approx(f.evidence["measured_us"], rel=0.05)
    assert not any(r.tunable for r in kernel_evidence(a).rows)


def test_without_a_resolver_or_a_reference_there_is_no_headroom_finding(tmp_path: Path) -> None:
    assert not [f for f in analyze_trace(decode_trace(tmp_path, [SLOW])).findings if f.code == "kernel_headroom"]
    a100 = analyze(decode_trace(tmp_path, [SLOW], gpu="NVIDIA A100-SXM4-80GB"))  # A100: no measured GEMM curve
    assert not [f for f in a100.findings if f.code == "kernel_headroom"]
    assert any("no measured GEMM curve for a100_sxm" in n for n in a100.peaks[0][1])


def test_aiconfigurators_measured_gemm_curve_is_the_reference_where_it_covers_the_shape(tmp_path: Path) -> None:
    """B200 has aiconfigurator's measured GEMM curves (specs/data/opcurves): the slow kernel is named against the
    curve's time at its dtype and shape (checked against the curve looked up here), never below the roofline."""
    from servescope.perfmodel import opcurve

    b200 = analyze(decode_trace(tmp_path, [SLOW], gpu="NVIDIA B200"))
    (f,) = [f for f in b200.findings if f.code == "kernel_headroom"]
    assert any("specs/data/opcurves" in n for n in b200.peaks[0][1])
    m, k, n = SLOW[1][0][0], SLOW[1][0][1], SLOW[1][1][1]
    t = opcurve.gemm_time_s("b200_sxm", "vllm", "", "bf16", [m], n, k)
    assert t is not None
    roofline_us = 2 * (m * k + k * n + m * n) / 7.7e12 * 1e6  # bf16 bytes over B200's 7.7 TB/s datasheet
    per_call_us = max(float(t[0]) * 1e6, roofline_us)
    assert f.evidence["top_achievable_us"] == pytest.approx(4 * per_call_us, rel=0.05)  # 4 layers per step
