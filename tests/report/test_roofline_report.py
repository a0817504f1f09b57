"""The roofline in `servescope trace` output (issue 19 part 6): trace/1 kernel-row keys, peaks from specs in the
report layer (an unknown GPU gives none, never invented), and the text table of the top kernels with shapes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from independent import DATA
from servescope.advise import peaks_for
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.roofline import SHAPE_STATUSES
from servescope.report.trace_json import trace_document
from servescope.report.trace_text import render_trace

B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
NEW_KEYS = {"flops", "bytes", "achieved_tflops", "achieved_tbps", "pct_of_peak", "bound", "waves"}


def _text(path: Path) -> str:
    buf = io.StringIO()
    render_trace(analyze_trace(path), Console(file=buf, width=200, force_terminal=False))
    return buf.getvalue()


def test_kernel_rows_carry_the_roofline_keys() -> None:
    doc = json.loads(json.dumps(trace_document(analyze_trace(B200))))
    rank = doc["ranks"][0]
    assert rank["peaks"]["gpu"] == "b200_sxm" and "specs/data/opcurves" in rank["peaks"]["gemm_curve"]
    assert any("aiconfigurator-core's measured GEMM curves on b200_sxm" in n for n in rank["roofline_notes"])
    rows = rank["by_kind"][0]["top_kernels"]
    assert all(set(r) >= NEW_KEYS for r in rows)
    gemm = next(r for r in rows if r["name"] == "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT")
    # 36 addmm [888,2880]x[2880,640] bf16: 2·M·N·K FLOPs each, from the op's Input Dims
    assert gemm["flops"] == 36 * 2 * 888 * 640 * 2880 and gemm["bound"] == "compute"
    assert gemm["achieved_tflops"] == round(gemm["flops"] / (gemm["total_us"] * 1e-6) / 1e12, 4)
    assert 0 < gemm["pct_of_peak"] < 100
    # % of achievable: the roofline-floored aiconfigurator curve time over the measured time (independent lookup)
    from servescope.perfmodel import opcurve

    t = opcurve.gemm_time_s("b200_sxm", "vllm", "", "bf16", [888], 640, 2880)
    assert t is not None
    floor_s = 2 * 888 * 640 * 2880 / 2.25e15  # B200 dense bf16 peak, compute-bound at this shape
    want = 36 * max(float(t[0]), floor_s) / (gemm["total_us"] * 1e-6) * 100
    assert gemm["pct_of_achievable"] == pytest.approx(want, rel=0.02)
    moe = rows[0]
    assert moe["flops"] is None and moe["bound"] is None and moe["no_shape"] == "no_model" and moe["waves"] > 1
    work = rank["by_kind"][0]["work"]
    assert work["classes"]["gemm"]["flops"] >= gemm["flops"]
    assert set(work["unshaped_us"]) <= set(SHAPE_STATUSES) - {"shaped"}
    assert "no_lengths" in work["unshaped_us"]  # vllm::unified_attention without detailed step annotations


def test_unknown_gpu_gives_no_peaks() -> None:
    peaks, notes = peaks_for("NVIDIA A100-PG509-200", 108)
    assert peaks is None and "not in servescope's specs" in notes[0]
    assert peaks_for(None, None)[0] is None
    peaks, notes = peaks_for("AMD Instinct MI300X", None)
    assert peaks is not None and peaks.achievable is not None and peaks.sm_count == 304
    assert any("measured on mi300x" in n for n in notes)


def test_text_report_has_a_roofline_table_only_with_shapes(tmp_path: Path) -> None:
    text = _text(B200)
    assert "roofline of the top kernels with shapes" in text and "specs/data/opcurves" in text
    assert "shapes: 2.774 ms of 11.666 ms" in text and "vLLM detailed_trace_annotation off" in text  # + rotary, fp8 quant
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 50,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 1, "correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 10,
         "args": {"External id": 1, "correlation": 9, "device": 0, "stream": 7}},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    text = _text(path)
    assert "roofline of the top kernels" not in text
    assert "no kernel carries a shape: 0.010 ms of summed GPU time without one (no Input Dims" in text
