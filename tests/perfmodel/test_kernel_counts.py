"""Kernels per step and per layer part, counted in real traces (bench/measure_kernels_per_layer.py), and their use in
the step model's kernel count (perfmodel/ops.kernels_per_step).

The bench script cuts a step by kernel class (servescope's classify stage: a block starts at a `norm` followed by a
`gemm`). The checks below recount the same traces with stdlib json and kernel *names* only: the residual RMSNorm
kernels (recognised by name) delimit the blocks, even-numbered blocks are attention, odd ones MLP.
"""

from __future__ import annotations

import gzip
import json
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from bench_scripts import bench_script
from servescope.perfmodel.ops import build_ops, kernel_counts, kernels_per_step
from servescope.perfmodel.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces" / "tracelens"
VLLM_DECODE = TRACES / "inference/vllm_decode_full/graph_execution.json.gz"
SGLANG = TRACES / "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"
DATA = ROOT / "src/servescope/specs/data/kernel_counts.toml"


def _bench():  # type: ignore[no-untyped-def]
    return bench_script("measure_kernels_per_layer")


def _gpu_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        ev = json.loads(f.read(), strict=False)["traceEvents"]
    return sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])


def _by_residual_norms(names: list[str], is_residual_norm) -> tuple[int, list[int], list[int], int]:
    """(head, attention block sizes, MLP block sizes, tail): blocks between consecutive residual norms."""
    at = [i for i, n in enumerate(names) if is_residual_norm(n)]
    assert len(at) % 2 == 1  # 2 per layer + the final norm
    sizes = [b - a for a, b in zip(at, at[1:], strict=False)]
    return at[0], sizes[0::2], sizes[1::2], len(names) - at[-1]


def test_vllm_decode_counts_match_a_stdlib_recount() -> None:
    ev = _gpu_events(VLLM_DECODE)
    names = [e["name"] for e in ev]
    head, attn, mlp, tail = _by_residual_norms(names, lambda n: "Rmsnorm2dFwd" in n)
    assert len(ev) == 434 and len(attn) == 24  # gpt-oss-20b: 24 layers
    # one rotary and one KV-cache write per attention layer, two MXFP4 expert GEMMs per MoE layer
    assert sum("rotary_embedding_kernel" in n for n in names) == 24
    assert sum("reshape_and_cache_flash" in n for n in names) == 24
    assert sum(n.startswith("_matmul_ogs_") for n in names) == 48
    s = _bench().segment([(n, c, "0") for n, c in zip(names, _classes(VLLM_DECODE), strict=True)])
    assert s.total == 434 and s.layers == 24 and s.mlp_kind == "moe"
    assert list(s.attention) == attn and list(s.mlp) == mlp
    assert s.step == head + tail == 15 and s.collective == 0
    assert s.total == s.step + sum(s.attention) + sum(s.mlp)


def test_sglang_qwen3_counts_match_a_stdlib_recount() -> None:
    ev = _gpu_events(SGLANG)
    main = Counter(e["tid"] for e in ev).most_common(1)[0][0]
    names = [e["name"] for e in ev if e["tid"] == main]
    # residual norms: aiter add_rmsnorm with 256-thread blocks; the per-head q/k norms use 64 (Li64)
    head, attn, mlp, tail = _by_residual_norms(names, lambda n: "add_rmsnorm_quant_kernel" in n and "Li256" in n)
    assert len(attn) == 36 and set(attn) == {10} and set(mlp) == {4}  # Qwen3-8B: 36 layers, dense MLP
    rows = _bench().gpu_rows(SGLANG)
    s = _bench().segment(rows)
    assert s.total == len(ev) == 534 and s.layers == 36 and s.mlp_kind == "dense"
    assert list(s.attention) == attn and list(s.mlp) == mlp
    assert s.side_stream == len(ev) - len(names) and s.step == head + tail + s.side_stream


def _classes(path: Path) -> list[str]:
    return [c for _, c, _ in _bench().gpu_rows(path)]


def test_data_file_model_section_is_the_decode_trace() -> None:
    doc = tomllib.loads(DATA.read_text(encoding="utf-8"))
    m, t = doc["model"], doc["trace"]["vllm_graph_decode"]
    assert m["attention"] == t["attention_per_layer"] and m["moe"] == t["mlp_per_layer"]
    assert m["step"] == t["step_kernels"] and m["dense_mlp"] == doc["trace"]["sglang_eager_prefill"]["mlp_per_layer"]
    assert kernel_counts()["attention"] == pytest.approx(179 / 24)  # 1 layer of 6, 11 of 7, 12 of 8 (trace above)


def test_kernels_per_step_by_hand() -> None:
    k = kernel_counts()
    a, mla, dense, moe, shared, step = (k[x] for x in ("attention", "mla_extra", "dense_mlp", "moe", "shared_expert",
                                                       "step"))
    # Qwen3-8B: 36 GQA layers, 36 dense MLPs
    assert kernels_per_step(Scenario.build("qwen3-8b", "h200_sxm", tp=1)) == round(step + 36 * a + 36 * dense)
    # gpt-oss-20b: 24 GQA layers, 24 MoE layers -> the 434 kernels of its FULL-graph decode trace
    assert build_ops(Scenario.build("gpt-oss-20b", "h200_sxm", tp=1)).kernels_per_step == 434
    # Kimi-K2.5: 61 MLA layers, 1 dense MLP (first_k_dense_replace 1), 60 MoE layers with a shared expert
    sc = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, quant="bf16", moe_quant="int4-w4a16")
    expect = step + 61 * (a + mla) + 1 * dense + 60 * (moe + shared)
    assert kernels_per_step(sc) == round(expect) == 1559
