"""Graph-mode truth (issue 19 parts 1 and 5): idle inside a CUDA-graph replay is reported as such, never as
launch-bound; a replayed trace says what it cannot give; `--capture FILE` gives replayed kernels their shapes by kernel
name, and a capture of another GPU or model is refused naming both. Expected values are computed here from the raw
events (stdlib json, tests/independent.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from independent import DATA, raw_events, union_us
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.breakdown import breakdown
from servescope.cli import main
from servescope.errors import CaptureMismatch
from servescope.trace import load_trace

DECODE_FULL = DATA / "traces/tracelens/inference/vllm_decode_full/graph_execution.json.gz"


def _write(path: Path, events: list[dict[str, Any]], gpu: str = "NVIDIA H100 80GB HBM3") -> Path:
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": gpu, "numSms": 132}], "traceEvents": events}))
    return path


def replay_trace(path: Path, gaps_us: float = 20.0, gpu: str = "NVIDIA H100 80GB HBM3",
                 module: str | None = None) -> Path:
    """One decode step: one cudaGraphLaunch replaying gemm_a, gemm_b, gemm_a (10 µs each) with `gaps_us` between."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 500,
         "name": "execute_context_0(0)_generation_8(8)"},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 77}}]
    for i, name in enumerate(("gemm_a", "gemm_b", "gemm_a")):
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 20 + i * (10 + gaps_us),
                       "dur": 10, "args": {"correlation": 77, "device": 0, "stream": 7}})
    if module:
        events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {module}_0", "pid": 1, "tid": 1,
                       "ts": 1, "dur": 400})
    return _write(path, events, gpu)


MM = {"gemm_a": [[8, 64], [64, 128]], "gemm_b": [[8, 128], [128, 256]]}


def capture_trace(path: Path, gpu: str = "NVIDIA H100 80GB HBM3", module: str | None = None,
                  shapes: bool = True) -> Path:
    """A capture pass: an aten::mm op per kernel with its Input Dims, and the launch under capture naming the kernel
    (args.kernel); nothing runs on the GPU."""
    events: list[dict[str, Any]] = []
    for i, name in enumerate(("gemm_a", "gemm_b", "gemm_a")):
        args = {"External id": i + 1, **({"Input Dims": MM[name], "Input type": ["c10::BFloat16"] * 2} if shapes else {})}
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i, "dur": 50,
                    "args": args},
                   {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                    "ts": 100 * i + 10, "dur": 5, "args": {"External id": i + 1, "correlation": 500 + i, "kernel": name}}]
    if module:
        events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {module}_0", "pid": 1, "tid": 1,
                       "ts": 0, "dur": 400})
    return _write(path, events, gpu)


def test_idle_inside_a_replay_is_not_launch_bound(tmp_path: Path) -> None:
    a = analyze_trace(replay_trace(tmp_path / "r.json", gaps_us=20.0))
    (s,) = a.ranks[0].steps
    assert s.graph_idle_us == pytest.approx(40.0) and s.idle_us == pytest.approx(40.0)  # span 70, busy 30
    codes = {f.code for f in a.findings}
    assert "graph_replay_idle" in codes and not codes & {"launch_bound", "host_bound"}
    (f,) = [f for f in a.findings if f.code == "graph_replay_idle"]
    assert f.severity == "high" and f.evidence["graph_idle_share_of_span"] == pytest.approx(40 / 70)


def test_graph_idle_of_a_real_replay_equals_an_independent_union() -> None:
    events = raw_events(DECODE_FULL)
    launch = {e["args"]["correlation"] for e in events if e.get("name") in ("cudaGraphLaunch", "hipGraphLaunch")}
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and (e.get("args") or {}).get("correlation") in launch]
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    expected = span - union_us([(e["ts"], e["ts"] + e["dur"]) for e in kernels])
    (s,) = breakdown(load_trace(DECODE_FULL)).steps
    # stdlib json parses epoch µs (~1.8e15) to float64: 0.25 µs steps; the loader keeps ns. Within one step of that.
    assert s.graph_idle_us == pytest.approx(expected, abs=0.25) and s.graph_idle_us <= s.idle_us
    assert s.graph_idle_us < 0.01 * s.gpu_span_us  # a full-graph decode: kernels back to back inside the replay
    (mode,) = [f for f in analyze_trace(DECODE_FULL).findings if f.code == "graph_mode"]
    assert "cannot give their shapes" in mode.message and "--capture" in mode.message  # what it cannot give, how


def test_capture_gives_replayed_kernels_their_shapes(tmp_path: Path) -> None:
    replay = replay_trace(tmp_path / "r.json")
    assert analyze_trace(replay).ranks[0].kinds[0].unshaped_us == {"no_op": 30.0}
    a = analyze_trace(replay, capture=capture_trace(tmp_path / "c.json"))
    (k,) = a.ranks[0].kinds
    got = {t.name: (t.shaped_calls, t.flops) for t in k.top_kernels}
    assert got == {"gemm_a": (2, 2 * (2 * 8 * 128 * 64)), "gemm_b": (1, 2 * 8 * 256 * 128)}
    assert k.unshaped_us == {} and any("take their shapes from the capture trace" in w for w in a.warnings)


def test_a_capture_of_another_gpu_or_model_is_refused_with_both_names(tmp_path: Path) -> None:
    replay = replay_trace(tmp_path / "r.json", gpu="NVIDIA B200", module="GptOssForCausalLM")
    with pytest.raises(CaptureMismatch, match="NVIDIA H100 80GB HBM3.*NVIDIA B200"):
        analyze_trace(replay, capture=capture_trace(tmp_path / "c.json", module="GptOssForCausalLM"))
    other = capture_trace(tmp_path / "c2.json", gpu="NVIDIA B200", module="Qwen3ForCausalLM")
    with pytest.raises(CaptureMismatch, match="Qwen3ForCausalLM.*GptOssForCausalLM"):
        analyze_trace(replay, capture=other)
    with pytest.raises(CaptureMismatch, match="carries a shape"):
        analyze_trace(replay, capture=capture_trace(tmp_path / "c3.json", gpu="NVIDIA B200", shapes=False))
    result = CliRunner().invoke(main, ["trace", str(replay), "--capture", str(other)])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert "Qwen3ForCausalLM" in result.output and "GptOssForCausalLM" in result.output
