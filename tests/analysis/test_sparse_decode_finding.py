"""The sparse-attention decode finding (analysis.sparse_decode): the grid collapse named by name and shape, with the
split-K what-if the peaks' pricer gives (advise.peaks → perfmodel.split_k), and the kernels classed as attention."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servescope.advise.peaks import peaks_for
from servescope.analysis.analyze import analyze_trace, example_trace
from servescope.analysis.breakdown_records import KernelStats
from servescope.analysis.classify import classify_name
from servescope.analysis.sparse_decode import is_sparse_decode, sparse_decode_findings
from servescope.specs.decode_kernels import shape_for

REDUCE_KERNEL_S = 1.98793e-6  # specs/data/engine_overheads.toml [vllm.graph] per_kernel_us


def test_finding_names_the_grid_collapse_with_a_what_if() -> None:
    b = analyze_trace(example_trace()).ranks[0]
    s = b.kinds[0]
    attn = KernelStats("_fused_gather_dequant_attn_kernel", "attention", None, 3, 639.0, 213.0, 1 / 170, 1)
    index = KernelStats("_fp8_paged_mqa_logits_rowwise_kernel_topk", "other", None, 3, 60.0, 20.0, 0.5, 85)
    decode = replace(s, kind="decode", top_kernels=(attn, index), gpu_busy_us=1775.0)
    rank = replace(b, kinds=(decode,), num_sms=170)
    peaks, _ = peaks_for("NVIDIA GeForce RTX 5090", 170)
    assert peaks is not None and peaks.split_k is not None
    [f] = sparse_decode_findings(rank, peaks.split_k)
    assert f.code == "sparse_decode_grid_collapse" and f.mitigations == ("split_k_attention",)
    assert "1 CTAs on 170 SMs: 1% of SMs busy" in f.message and "split-K what-if: S=" in f.message
    assert f.evidence["share_of_busy"] == pytest.approx(639 / 1775)
    assert f.evidence["index_stream"] == index.name
    assert float(f.evidence["split_k_us"]) < 213.0  # type: ignore[arg-type]
    assert float(f.evidence["split_k_reduce_us"]) > REDUCE_KERNEL_S * 1e6  # type: ignore[arg-type]
    # without a pricer the collapse is still named, the what-if says why it is missing
    [g] = sparse_decode_findings(rank, None)
    assert "1 CTAs on 170 SMs" in g.message and "no split-K what-if" in g.message
    # a grid that fills the SMs is no collapse; a split kernel is the split path itself
    full = replace(decode, top_kernels=(replace(attn, grid_blocks=340, blocks_per_sm=2.0), index))
    assert sparse_decode_findings(replace(rank, kinds=(full,)), peaks.split_k) == []
    assert not is_sparse_decode("_fused_gather_dequant_attn_splitk_kernel")


def test_the_names_the_analysis_finds_are_the_names_the_specs_shape() -> None:
    names = ("_fused_gather_dequant_attn_kernel", "_sparse_attn_decode_ragged_kernel", "flash_mla_sparse_decode_fwd",
             "sparse_mla_decode_kernel", "_sparse_attn_decode_partial_kernel", "ampere_bf16_gemm")
    assert [is_sparse_decode(n) for n in names] == [shape_for(n) is not None for n in names]


def test_sparse_decode_kernels_are_attention_not_casts() -> None:
    # "dequant" in vLLM's SM12x kernel name is its fused dequant-in-registers, not a cast kernel
    assert classify_name("_fused_gather_dequant_attn_kernel")[0] == "attention"
    assert classify_name("_sparse_attn_decode_ragged_kernel")[0] == "attention"
    assert classify_name("per_token_group_quant_fp8")[0] == "cast"
