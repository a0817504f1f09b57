"""The cost models of analysis/costs.py and op_costs.py beyond dense GEMMs (issue 19 part 2): block-scaled and 4-bit GEMMs, grouped
MoE, paged attention from vLLM's detailed step lengths, MLA decode, sparse top-k; each against a hand computation
of its docstring formula, and on the shared traces against an independent computation from the raw `Input Dims` and
the raw step label (stdlib json + re, tests/independent.py), never through servescope's parser."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from independent import DATA, raw_events
from servescope.analysis.breakdown import breakdown
from servescope.analysis.classify import classify
from servescope.analysis.costs import (
    QUANT_LAYOUTS,
    causal_pairs,
    mla_decode_cost,
    moe_gemm_cost,
    paged_attention_cost,
    quantized_gemm_cost,
    sparse_topk_attention_cost,
)
from servescope.analysis.op_costs import op_cost
from servescope.analysis.roofline import attach_work
from servescope.analysis.steps import find_steps
from servescope.trace import load_trace

TRACES = DATA / "traces" / "tracelens" / "inference"
ELEM = {"c10::BFloat16": 2, "c10::Half": 2, "c10::Float8_e4m3fn": 1, "float": 4}


def test_quantized_gemm_formulas() -> None:
    m, n, k = 16, 7168, 2048
    # FP8 128x128 weight blocks, 1x128 activation groups, fp32 scales, bf16 out
    flops, nbytes = quantized_gemm_cost(m, n, k, QUANT_LAYOUTS["fp8_block"])
    assert flops == 2 * m * n * k
    assert nbytes == m * k + k * n + m * n * 2 + (k // 128) * (n // 128) * 4 + m * (k // 128) * 4
    # NVFP4: 0.5 B per value, one 1 B scale per 16 along K, on both operands
    _, nbytes = quantized_gemm_cost(m, n, k, QUANT_LAYOUTS["nvfp4"])
    assert nbytes == m * k / 2 + k * n / 2 + m * n * 2 + (k // 16) * n + m * (k // 16)
    # MXFP4 weights (32-element blocks, E8M0) with bf16 activations (gpt-oss)
    _, nbytes = quantized_gemm_cost(m, n, k, QUANT_LAYOUTS["mxfp4"])
    assert nbytes == m * k * 2 + k * n / 2 + m * n * 2 + (k // 32) * n
    _, ragged = quantized_gemm_cost(1, 100, 130, QUANT_LAYOUTS["fp8_block"])
    assert ragged == 130 + 130 * 100 + 100 * 2 + 2 * 1 * 4 + 2 * 4  # partial blocks round up


def test_moe_and_attention_formulas() -> None:
    # 888 tokens, top-4 of 128 experts, hidden 2880, intermediate 360 (gpt-oss-120b per TP=8 shard), mxfp4 weights
    flops, nbytes = moe_gemm_cost(888, 4, 128, 2880, 360, 0.5, 2)
    rows = 888 * 4
    assert flops == 2 * rows * 2880 * 360 * 3
    assert nbytes == 128 * 2880 * 360 * 3 * 0.5 + 2 * rows * 2880 * 2 + 2 * rows * 720 * 2
    _, few = moe_gemm_cost(1, 4, 128, 2880, 360, 0.5, 2)  # a decode token touches 4 experts, not 128
    assert few == 4 * 2880 * 360 * 3 * 0.5 + 2 * 4 * 2880 * 2 + 2 * 4 * 720 * 2
    # one request of 10 new tokens on 30 keys (20 cached): query i sees 21 + i keys
    assert causal_pairs(10, 300, 100) == sum(21 + i for i in range(10))
    assert causal_pairs(3, 3 * 100, 3) == 300  # three decode tokens on 100 keys each
    flops, nbytes = paged_attention_cost(32, 8, 128, 10, 10, 30, 100, 300, 2, 1)
    assert flops == 4 * 32 * 128 * 255 and nbytes == 2 * 10 * 32 * 128 * 2 + 2 * 30 * 8 * 128 * 1
    # DeepSeek MLA decode: 128 heads, latent 512 + rope 64, fp8 cache, 4 requests of 4096 keys
    flops, nbytes = mla_decode_cost(4, 128, 4 * 4096, 512, 64, 1)
    assert flops == 2 * 128 * 16384 * 576 + 2 * 128 * 16384 * 512
    assert nbytes == 16384 * 576 + 4 * 128 * 576 * 2 + 4 * 128 * 512 * 2
    flops, nbytes = sparse_topk_attention_cost(2, 64, 2048, 576, 512, 1)
    assert flops == 2 * 2 * 64 * 2048 * (576 + 512) and nbytes == 2 * 2048 * 576 + 2 * 64 * (576 * 2 + 512 * 2)


# ------------------------------------------------------------------------------------------- ops from engine schemas
def _one_op(name: str, dims: list[Any], types: list[str]) -> tuple[str, float | None, float | None]:
    c = op_cost(name, json.dumps(dims), json.dumps(types))
    return c.status, c.flops, c.bytes


def test_fused_experts_from_the_engine_schema() -> None:
    """vllm::outplace_fused_experts(hidden [T,H], w1 [E,2I,H], w2 [E,H,I], topk_weights [T,k], topk_ids [T,k])."""
    t, h, e, i, k = 64, 2048, 256, 512, 8
    dims = [[t, h], [e, 2 * i, h], [e, h, i], [t, k], [t, k]]
    status, flops, nbytes = _one_op("vllm::outplace_fused_experts", dims,
                                    ["c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "int"])
    rows = t * k
    assert status == "shaped" and flops == 2 * rows * h * i * 3
    assert nbytes == min(e, rows) * h * i * 3 * 1 + 2 * rows * h * 2 + 2 * rows * 2 * i * 2
    packed = [[t, h], [e, 2 * i, h // 2], [e, h, i // 2], [t, k], [t, k]]  # int4 W4A16, two values per byte
    status, flops4, nbytes4 = _one_op("sglang::inplace_fused_experts", packed,
                                      ["c10::BFloat16", "unsigned char", "unsigned char", "float", "int"])
    assert status == "shaped" and flops4 == flops
    assert nbytes4 == min(e, rows) * h * i * 3 * 0.5 + 2 * rows * h * 2 + 2 * rows * 2 * i * 2
    assert _one_op("vllm::outplace_fused_experts", [[t, h], [e, 2 * i, h + 1], [e, h, i], [t, k], [t, k]],
                   ["c10::BFloat16"] * 5)[0] == "unsupported"
    assert _one_op("vllm::outplace_fused_experts", [[t, h], [e, 2 * i, h], [e, h, i], [t + 1, k], [t + 1, k]],
                   ["c10::BFloat16"] * 5)[0] == "malformed"


def test_nvfp4_and_block_fp8_gemm_count_their_scales() -> None:
    m, n, k = 32, 4096, 7168
    dims = [[m, n], [m, k // 2], [n, k // 2], [m, k // 16], [n, k // 16], []]
    types = ["c10::BFloat16", "unsigned char", "unsigned char", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float"]
    status, flops, nbytes = _one_op("_C::cutlass_scaled_fp4_mm", dims, types)
    assert status == "shaped" and flops == 2 * m * n * k
    assert nbytes == m * n * 2 + m * k // 2 + n * k // 2 + m * (k // 16) + n * (k // 16)
    c = op_cost("_C::cutlass_scaled_fp4_mm", json.dumps(dims), json.dumps(types))
    assert c.dtype == "fp4" and (c.m, c.n, c.k) == (m, n, k)
    # block FP8: a_scales [M, K/128], b_scales [K/128, N/128] (fp32) counted from their own dims
    dims = [[m, n], [m, k], [k, n], [m, k // 128], [k // 128, n // 128], []]
    types = ["c10::BFloat16", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", ""]
    status, flops, nbytes = _one_op("_C::cutlass_scaled_mm", dims, types)
    assert status == "shaped" and flops == 2 * m * n * k
    assert nbytes == m * k + k * n + m * n * 2 + m * (k // 128) * 4 + (k // 128) * (n // 128) * 4


# ------------------------------------------------------------------------------------------- paged attention, real
_DETAILED = re.compile(r"sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)")


def _independent_attention(path: Path) -> dict[int, tuple[float, float]]:
    """Per attention op (External id): 4·H·D·(Σsq·sk − (Σsq² − Σsq)/2) FLOPs and Q+O+KV bytes, from the raw
    Input Dims of the op and the raw sums of the trace's detailed `execute_…` label (one step per trace)."""
    events = raw_events(path)
    label = next(e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    parts = [tuple(map(int, m)) for m in _DETAILED.findall(label)]
    sq, sk, sqsq, sqsk = (sum(p[i] for p in parts) for i in range(4))
    out = {}
    for e in events:
        a = e.get("args") or {}
        if e.get("cat") != "cpu_op" or e["name"] not in ("vllm::unified_attention_with_output",
                                                          "aiter::mha_batch_prefill"):
            continue
        (t, h, d), (_, hkv, _) = a["Input Dims"][0], a["Input Dims"][1]
        bq, bkv = ELEM[a["Input type"][0]], ELEM[a["Input type"][1]]
        pairs = sqsk - (sqsq - sq) / 2
        out[a["External id"]] = (4 * h * d * pairs, 2 * t * h * d * bq + 2 * sk * hkv * d * bkv)
    return out


@pytest.mark.parametrize("path", [TRACES / "vllm_prefilldecode_piecewise/graph_execution.json.gz",
                                  TRACES / "sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"],
                         ids=lambda p: p.parent.name)
def test_paged_attention_work_equals_an_independent_computation(path: Path) -> None:
    expected = _independent_attention(path)
    events = classify(load_trace(path).events)
    table = find_steps(events)
    gpu, _ = attach_work(events, table.gpu_events, table.steps)
    att = gpu.filter((pl.col("work_model") == "attention") & (pl.col("kind") == "kernel"))
    ops = (att.join(events.filter(pl.col("kind").is_in(("runtime", "driver"))).select("correlation",
                                                                                      pl.col("external_id").alias("op")),
                    on="correlation").group_by("op").agg(pl.col("work_flops").sum(), pl.col("work_bytes").sum()))
    got = {int(o): (f, b) for o, f, b in ops.iter_rows()}
    assert len(expected) >= 24 and set(got) == set(expected)  # every attention op, one per layer
    for op, (flops, nbytes) in expected.items():
        assert got[op] == pytest.approx((flops, nbytes), rel=1e-9)
    assert math.isclose(sum(f for f, _ in got.values()), sum(f for f, _ in expected.values()), rel_tol=1e-12)


def test_attention_without_step_lengths_is_counted_apart(tmp_path: Path) -> None:
    """The b200 label has no sq/sk sums: its attention kernels carry no shape, with the reason named."""
    b = breakdown(load_trace(DATA / "traces/tracelens/b200/eager_trace.json.gz"))
    (k,) = b.kinds
    assert k.unshaped_us.get("no_lengths", 0.0) > 0
    assert not any(g.model == "attention" for g in k.work)


def test_malformed_dims_of_the_new_ops_are_malformed() -> None:
    for name, dims in (("vllm::unified_attention_with_output", [[8, 4], [8, 1, 64]]),
                       ("vllm::outplace_fused_experts", [[4, 8]]),
                       ("_C::cutlass_scaled_fp4_mm", [[4, 8], [4, "x"], [8, 4]])):
        assert op_cost(name, json.dumps(dims), json.dumps(["c10::BFloat16"] * len(dims))).status == "malformed"
