"""The engines' sparse-attention decode kernels (DSA / sparse MLA of DeepSeek-V3.2/V4 and GLM-5): name → loop shape.

Does: hold, per kernel, the regex its name matches and what one CTA of it does — tokens per tile, heads per CTA (the
grid is tokens × ⌈heads / head tile⌉), bytes one token reads, the query and fp32 state widths, the token segments its
loop walks by default, and its split-K combine's parallelism — each with its source; `shape_for(name)` finds one.
Does not: price anything (perfmodel.split_k does) or detect a kernel in a trace (analysis.sparse_decode does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FP8_DS_MLA = "vLLM fp8_ds_mla cache row: 512 fp8 NoPE + 4 fp32 scales + 64 bf16 RoPE = 656 B, + a 4 B int32 index"
_DSV4_ROW = ("vLLM ROCm DSV4 cache (rocm_aiter_mla_sparse.py): 576 B data + 8 B scales per token, + a 4 B int32 "
             "index")


@dataclass(frozen=True)
class DecodeKernel:
    """One engine's sparse decode kernel: its loop and state (module docstring), with its source."""

    label: str
    pattern: str               # regex on the kernel name
    block: int                 # tokens per tile of its loop
    head_block: int            # heads per CTA
    token_bytes: float         # bytes one token reads (KV row + index)
    q_dim: int                 # query width, bf16
    state_dim: int             # fp32 accumulator width a split stores
    segments: tuple[int, ...]  # tokens per CTA of each segment by default (the model's top-k and window replace them)
    slices: int                # combine CTAs per output tile
    source: str


KERNELS = (
    DecodeKernel(
        "vLLM SM12x Triton sparse-MLA (GLM-5 / DeepSeek-V3.2)", r"_fused_gather_dequant_attn_kernel$", 32, 16,
        660.0, 576, 512, (2048,), 8,
        "vllm-project/vllm#54929 sm12x_sparse_mla_attn.py: BLOCK_N=32, HEAD_BLOCK=16, num_warps=4, num_stages=1, "
        "grid (T, cdiv(H, head_block)); acc fp32 [H, 512]; " + _FP8_DS_MLA + "; top-k 2048 = index_topk of "
        "GLM-5.x and DeepSeek-V3.2 config.json; the combine is 'D-slice-parallel' (PR text), slice width not "
        "stated: 64 assumed (8 slices of 512)"),
    DecodeKernel(
        "vLLM ROCm DeepSeek-V4 sparse decode", r"_sparse_attn_decode_ragged_kernel$", 16, 16,
        588.0, 576, 576, (128, 1024), 1,
        "vllm-project/vllm#44899 (DSV4 16 heads per rank → one head block; SWA ≤ 128, top-k ≤ 1024); "
        "rocm_aiter_mla_sparse.py single-pass path: BLOCK_K = 16 at head_dim ≥ 256, BLOCK_H = min(16, "
        "max(8, next_pow2(H))), main (SWA) and extra (top-k) segments walked separately; partial acc fp32 "
        "[H, 576]; the reduce kernel's grid is (queries, head blocks); " + _DSV4_ROW),
    DecodeKernel(
        "sparse-MLA / DSA decode (generic)", r"sparse.*(mla|attn).*decode|decode.*sparse|flash_?mla.*sparse|"
        r"sparse_?mla|dsa.*attn", 64, 16, 660.0, 576, 512, (2048,), 1,
        "generic: a 64-token tile assumed; " + _FP8_DS_MLA + "; top-k 2048 (DeepSeek-V3.2/GLM-5 index_topk)"),
)
# Kernels that are already the split path (their time is split-K's, not a collapsed grid)
_ALREADY_SPLIT = re.compile(r"split|partial|combine|reduce", re.I)


def shape_for(name: str) -> DecodeKernel | None:
    """The table's entry for a kernel name (None: not a sparse decode kernel, or already a split kernel)."""
    if _ALREADY_SPLIT.search(name):
        return None
    return next((k for k in KERNELS if re.search(k.pattern, name, re.I)), None)
