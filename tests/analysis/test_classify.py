"""Tests for servescope.analysis.classify: name rules on real names, op linkage, the real b200 trace.

Expected labels come from tests/data/kernel_names.csv (labelled by hand, see tests/data/README.md)
and, for the b200 trace, from counts computed here with stdlib gzip+json, independently of the loader
and the classifier.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.analysis.classify import (
    CAST_OPS,
    COLLECTIVES,
    KERNEL_CLASSES,
    LINKED_COLUMNS,
    classify,
    classify_name,
    name_head,
)
from servescope.analysis.rules import RULES
from servescope.errors import TraceError

DATA = Path(__file__).parents[1] / "data"
B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"


def _csv_rows() -> list[dict[str, str]]:
    with (DATA / "kernel_names.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------- name rules on real names


@pytest.mark.parametrize("row", _csv_rows(), ids=lambda row: row["name"][:60])
def test_real_kernel_name(row: dict[str, str]) -> None:
    expected = (row["expected_class"], row["expected_collective"] or None)
    assert classify_name(row["name"]) == expected


def test_csv_covers_every_class_but_none_missing() -> None:
    rows = _csv_rows()
    assert len(rows) >= 150
    assert len({row["name"] for row in rows}) == len(rows), "duplicate names in the CSV"
    labelled = {row["expected_class"] for row in rows}
    assert labelled == set(KERNEL_CLASSES)
    collectives = {row["expected_collective"] for row in rows} - {""}
    assert collectives == set(COLLECTIVES) - {"all_to_all"}  # no all-to-all kernel in any real source
    assert all(row["source"] for row in rows)


def test_rule_table_uses_only_known_labels() -> None:
    for _pattern, kernel_class, collective in RULES:
        assert kernel_class in KERNEL_CLASSES
        assert collective is None or collective in COLLECTIVES
        if collective is not None:
            assert kernel_class == "communication"


# Families with no real name in our traces or references: names constructed from the libraries'
# source (namespace + function name; template arguments illustrative). Not real observations.
CONSTRUCTED = [
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "communication", "all_to_all"),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*)", "communication", "all_to_all"),
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)", "communication", None),
    ("mooncake::ep::dispatch_kernel", "communication", "all_to_all"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "reduce_scatter"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "broadcast"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*)", "norm", None),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*)", "activation", None),
    ("void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u>(float*)", "sampling", None),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u>(half*)", "rotary", None),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<PosEncodingMode::kNone>(half*)", "attention", None),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<half, 8>(void*)", "communication", "all_reduce"),
    ("void vllm::paged_attention_v2_kernel<unsigned short, 128>(float*)", "attention", None),
    ("void vllm::paged_attention_v2_reduce_kernel<unsigned short, 128>(unsigned short*)", "attention", None),
    ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576>>(Flash_fwd_mla_params)", "attention", None),
    ("_fwd_kernel_stage1", "attention", None),
    ("_fwd_grouped_kernel_stage1", "attention", None),
    ("void ck_tile::kentry<fmha_fwd_kernel>(FmhaFwdKargs)", "attention", None),
    ("fused_moe_kernel", "moe", None),
    ("void vllm::moe::topkGatingSoftmax<8, 128>(float const*)", "moe", None),
    ("void vllm::moe::moe_align_block_size_kernel<int>(int const*)", "moe", None),
    ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 4>(int4 const*)", "moe", None),
    ("void marlin::Marlin<256, 1, 8, 8, 4, 8>(int4 const*)", "gemm", None),
    ("void machete::MacheteKernel<cutlass::bfloat16_t>(Params)", "gemm", None),
    ("void deep_gemm::fp8_gemm_kernel<128u, 128u>(float*)", "gemm", None),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u>(float*)", "gemm", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", None),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", None),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)", "gemm", None),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<>>(Argument)", "gemm", None),
    ("void vllm::silu_and_mul_kernel<c10::BFloat16>(c10::BFloat16*)", "activation", None),
    ("void vllm::gelu_tanh_and_mul_kernel<c10::BFloat16>(c10::BFloat16*)", "activation", None),
    ("_per_token_group_quant_fp8", "cast", None),
    ("void vllm::cvt_fp16_to_fp4<__nv_bfloat16, false>(int, int, long*)", "cast", None),
    ("void vllm::dynamic_per_token_scaled_fp8_quant_kernel<c10::BFloat16>(float*)", "cast", None),
    ("void cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, float const*, int)", "sampling", None),
    ("__amd_rocclr_copyBuffer", "memory", None),
    ("__amd_rocclr_fillBufferAligned", "memory", None),
    ("void cub::warpAllReduce<float>(float*)", "other", None),
    ("void BlockAllReduce<float, 256>(float*)", "other", None),
    ("void at::native::small_reduce_kernel<float>(float*)", "other", None),
    ("void tensorrt_llm::kernels::customAllReduceKernel<__nv_bfloat16>(Params)", "communication", "all_reduce"),
    ("void tensorrt_llm::kernels::moe_comm::moeA2ADispatchKernel<8>(Params)", "communication", "all_to_all"),
    ("void pplx::a2a_combine_kernel<__nv_bfloat16>(Params)", "communication", "all_to_all"),
    ("triton_tem_fused_addmm_0", "gemm", None),
    ("aiter::mla_decode_stage1_asm_fwd", "attention", None),
    ("void vllm::compute_property_kernel(int*)", "other", None),
]


@pytest.mark.parametrize(("name", "kernel_class", "collective"), CONSTRUCTED)
def test_constructed_family_names(name: str, kernel_class: str, collective: str | None) -> None:
    assert classify_name(name) == (kernel_class, collective)


@pytest.mark.parametrize(
    ("name", "head"),
    [
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "ncclDevKernel_SendRecv"),
        ("void f<(int)8, g(at::X&)::{lambda()#1}>(int, T2)", "void f<(int)8, g(at::X&)::{lambda()#1}>"),
        ("nvjet_tst_64x64", "nvjet_tst_64x64"),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD"),
        ("broken(", "broken("),
        ("(weird)", "(weird)"),
    ],
)
def test_name_head(name: str, head: str) -> None:
    assert name_head(name) == head


def test_arguments_do_not_decide_the_class() -> None:
    # `flashinfer::` in the argument list must not make a quantize kernel attention.
    name = "void tensorrt_llm::kernels::quantize_with_block_size<2, __nv_bfloat16>(int, flashinfer::BatchPrefillWithPagedKVCacheKernel*)"
    assert classify_name(name) == ("cast", None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_classify_name_total(name: str) -> None:
    kernel_class, collective = classify_name(name)
    assert kernel_class in KERNEL_CLASSES
    assert collective is None or (kernel_class == "communication" and collective in COLLECTIVES)


# ---------------------------------------------------------------- classify() on synthetic frames


def _frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    schema = {"kind": pl.Utf8, "name": pl.Utf8, "dur_us": pl.Float64, "correlation": pl.Int64, "external_id": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


COPY = "void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda(at::TensorIteratorBase&)>(int)"
LINKAGE_ROWS: list[dict[str, object]] = [
    # cast ops and the launches under them
    {"kind": "cpu_op", "name": "aten::copy_", "dur_us": 5.0, "correlation": None, "external_id": 10},
    {"kind": "cpu_op", "name": "aten::_to_copy", "dur_us": 5.0, "correlation": None, "external_id": 11},
    {"kind": "cpu_op", "name": "aten::to", "dur_us": 5.0, "correlation": None, "external_id": 12},
    {"kind": "cpu_op", "name": "aten::mm", "dur_us": 5.0, "correlation": None, "external_id": 13},
    {"kind": "runtime", "name": "cudaLaunchKernel", "dur_us": 1.0, "correlation": 100, "external_id": 11},
    {"kind": "driver", "name": "cuLaunchKernelEx", "dur_us": 1.0, "correlation": 101, "external_id": 12},
    {"kind": "runtime", "name": "cudaLaunchKernel", "dur_us": 1.0, "correlation": 102, "external_id": 13},
    # 7: linked by its own external_id
    {"kind": "kernel", "name": COPY, "dur_us": 2.0, "correlation": 99, "external_id": 10},
    # 8: no external_id; correlation -> runtime -> aten::_to_copy
    {"kind": "kernel", "name": COPY, "dur_us": 2.0, "correlation": 100, "external_id": None},
    # 9: correlation -> driver -> aten::to; a norm kernel under a cast op is a cast
    {"kind": "kernel", "name": "vllm::rms_norm_kernel<float>(float*)", "dur_us": 2.0, "correlation": 101, "external_id": None},
    # 10: under aten::mm: name rule
    {"kind": "kernel", "name": "nvjet_tst_64x64_TNT", "dur_us": 2.0, "correlation": 102, "external_id": 13},
    # 11: same copy kernel, unlinked: name rule says other
    {"kind": "kernel", "name": COPY, "dur_us": 2.0, "correlation": None, "external_id": None},
    # 12-13: communication and memory names win over a cast op
    {"kind": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(x)", "dur_us": 2.0, "correlation": None, "external_id": 10},
    {"kind": "kernel", "name": "Memset (Device)", "dur_us": 2.0, "correlation": None, "external_id": 10},
    # 14-15: copy engines are memory whatever their cpu_op
    {"kind": "memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "dur_us": 3.0, "correlation": 100, "external_id": 11},
    {"kind": "memset", "name": "Memset (Device)", "dur_us": 3.0, "correlation": None, "external_id": None},
    # 16: not a GPU row
    {"kind": "user_annotation", "name": "execute_context_1", "dur_us": 50.0, "correlation": None, "external_id": None},
]
LINKAGE_EXPECTED = (
    [None] * 7
    + ["cast", "cast", "cast", "gemm", "other", "communication", "memory", "memory", "memory", None]
)


def test_op_linkage_classes() -> None:
    out = classify(_frame(LINKAGE_ROWS))
    assert out["kernel_class"].to_list() == LINKAGE_EXPECTED
    assert out["collective"].to_list() == [None] * 12 + ["all_gather"] + [None] * 4
    assert out.schema["kernel_class"] == pl.Utf8
    assert out.schema["collective"] == pl.Utf8


def test_classify_is_pure_and_idempotent() -> None:
    frame = _frame(LINKAGE_ROWS)
    before = frame.clone()
    once = classify(frame)
    assert frame.equals(before)
    assert "kernel_class" not in frame.columns
    twice = classify(once)
    assert twice.equals(once)
    assert once.columns == [*frame.columns, "kernel_class", "collective", *LINKED_COLUMNS]


def test_without_link_columns_names_decide() -> None:
    frame = _frame(LINKAGE_ROWS).drop("external_id", "correlation")
    out = classify(frame)
    assert out["kernel_class"].to_list()[7:12] == ["other", "other", "norm", "gemm", "other"]


def test_empty_frame_and_missing_columns() -> None:
    empty = classify(_frame([]))
    assert empty.height == 0
    assert {"kernel_class", "collective"} <= set(empty.columns)
    nameless = classify(_frame([{"kind": "kernel", "name": None, "dur_us": 1.0, "correlation": None, "external_id": None}]))
    assert nameless["kernel_class"].to_list() == ["other"]
    with pytest.raises(TraceError, match="kind"):
        classify(pl.DataFrame({"name": ["x"]}))


KINDS = ["kernel", "memcpy", "memset", "runtime", "driver", "cpu_op", "user_annotation", None]
NAMES = ["aten::copy_", "aten::to", "ncclDevKernel_SendRecv(x)", COPY, "nvjet_tst_1", "Memset (Device)", "x"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(KINDS), st.sampled_from(NAMES), st.none() | st.integers(0, 4), st.none() | st.integers(0, 4)),
        max_size=30,
    )
)
def test_classify_properties(rows: list[tuple[str | None, str, int | None, int | None]]) -> None:
    frame = _frame([
        {"kind": k, "name": n, "dur_us": 1.0, "correlation": c, "external_id": x} for k, n, c, x in rows
    ])
    out = classify(frame)
    is_gpu = out["kind"].is_in(["kernel", "memcpy", "memset"]).fill_null(False)
    assert (out["kernel_class"].is_not_null() == is_gpu).all()
    assert set(out["kernel_class"].drop_nulls()) <= set(KERNEL_CLASSES)
    copies = out.filter(pl.col("kind").is_in(["memcpy", "memset"]))
    assert set(copies["kernel_class"]) <= {"memory"}
    comm = out.filter(pl.col("name") == "ncclDevKernel_SendRecv(x)", pl.col("kind") == "kernel")
    assert set(comm["collective"]) <= {"send_recv"}  # linkage never turns a collective into a cast
    assert out.filter(pl.col("kernel_class") != "communication")["collective"].null_count() == out.filter(
        pl.col("kernel_class") != "communication"
    ).height


# ---------------------------------------------------------------- the real b200 trace


def _b200_events() -> list[dict[str, object]]:
    with gzip.open(B200, "rt", encoding="utf-8") as handle:
        doc = json.load(handle)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


KIND_OF_CAT = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cpu_op": "cpu_op",
    "cuda_runtime": "runtime", "cuda_driver": "driver",
}


def _b200_frame(raw: list[dict[str, object]]) -> pl.DataFrame:
    """A minimal events frame built with stdlib json (no dependency on the loader)."""
    rows = []
    for event in raw:
        args = event.get("args") or {}
        assert isinstance(args, dict)
        rows.append({
            "kind": KIND_OF_CAT.get(str(event.get("cat")), "other"),
            "name": event["name"],
            "dur_us": float(event.get("dur", 0.0)),  # type: ignore[arg-type]
            "correlation": args.get("correlation"),
            "external_id": args.get("External id"),
        })
    return _frame(rows)


def _b200_expected_casts(raw: list[dict[str, object]]) -> int:
    """Kernels whose cpu_op is a cast op, by dictionaries: kernel ext id, else launch's ext id."""
    op_name = {e["args"]["External id"]: e["name"] for e in raw if e.get("cat") == "cpu_op"}  # type: ignore[index]
    launch_ext = {
        e["args"]["correlation"]: e["args"].get("External id")  # type: ignore[index, union-attr]
        for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }
    count = 0
    for e in raw:
        if e.get("cat") != "kernel":
            continue
        args = e["args"]
        ops = {op_name.get(args.get("External id")), op_name.get(launch_ext.get(args.get("correlation")))}  # type: ignore[union-attr]
        if ops & set(CAST_OPS):
            count += 1
    return count


def test_b200_trace_golden() -> None:
    raw = _b200_events()
    out = classify(_b200_frame(raw))
    kernels = out.filter(pl.col("kind") == "kernel")
    names = Counter(str(e["name"]) for e in raw if e.get("cat") == "kernel")
    multimem = sum(n for name, n in names.items() if "multimem_all_reduce_kernel" in name)
    assert multimem == 73
    by = kernels.group_by("kernel_class", "collective").len()
    assert by.filter(pl.col("collective") == "all_reduce")["len"].sum() == multimem
    assert by.filter(pl.col("collective") == "all_gather")["len"].sum() == 1
    # casts = kernels under aten::copy_ (73 copies) + the two quantize kernels, cast by name (see CSV)
    quantize = sum(n for name, n in names.items() if "quant" in name)
    assert quantize == 72
    assert kernels.filter(pl.col("kernel_class") == "cast").height == _b200_expected_casts(raw) + quantize
    norms = kernels.filter(pl.col("name").str.contains("fused_add_rms_norm_kernel"))
    assert norms.height == sum(n for name, n in names.items() if "fused_add_rms_norm_kernel" in name)
    assert set(norms["kernel_class"]) == {"norm"}  # _typeConvert in the name is not a cast
    memcpy = sum(1 for e in raw if e.get("cat") == "gpu_memcpy")
    assert out.filter(pl.col("kernel_class") == "memory").height == memcpy
    assert out.filter(~pl.col("kind").is_in(["kernel", "memcpy", "memset"]))["kernel_class"].null_count() == (
        out.height - kernels.height - memcpy
    )


def test_b200_through_the_loader_agrees() -> None:
    load_trace = pytest.importorskip("servescope.trace", reason="trace loader not importable").load_trace
    loaded = classify(load_trace(B200).events).filter(pl.col("kind") == "kernel")
    own = classify(_b200_frame(_b200_events())).filter(pl.col("kind") == "kernel")
    theirs = loaded.group_by("kernel_class").agg(pl.len(), pl.col("dur_us").sum()).sort("kernel_class")
    mine = own.group_by("kernel_class").agg(pl.len(), pl.col("dur_us").sum()).sort("kernel_class")
    assert theirs["kernel_class"].to_list() == mine["kernel_class"].to_list()
    assert theirs["len"].to_list() == mine["len"].to_list()
    assert theirs["dur_us"].to_list() == pytest.approx(mine["dur_us"].to_list())
    # Quality guard: unexplained kernel time stays small on this serving trace.
    other_us = own.filter(pl.col("kernel_class") == "other")["dur_us"].sum()
    assert other_us / own["dur_us"].sum() < 0.02
