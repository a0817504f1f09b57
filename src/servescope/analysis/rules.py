"""The ordered kernel-name rule table used by `servescope.analysis.classify`.

What it does: lists `(pattern, kernel_class, collective)` rows; the FIRST row whose pattern is found
(`re.search`) in the kernel-name head wins. The head is the name without its trailing argument list
(see `classify.name_head`), so argument types such as `flashinfer::...` or `cublasLtEpilogue_t` never
decide a class; template arguments stay, because they carry the real kernel
(`cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>`, `elementwise_kernel<..., FillFunctor<...>>`).
What it does not do: op linkage (casts by `aten::copy_`), which lives in `classify.py`.

Patterns are compiled case-insensitive. Order matters where families overlap;
each block says why it sits where it does. Names in the comments are real (tests/data/kernel_names.csv
gives the trace or document each was seen in).
"""

from __future__ import annotations

import re
from typing import Any

from servescope.units import BYTES_PER_ELEMENT

Rule = tuple[str, str, str | None]

# 1. Memory. Copy/fill engines, not compute: first, so nothing below can claim `Memcpy ...` rows
#    that some loaders emit as kernels. ROCm implements hipMemcpy/hipMemset as `__amd_rocclr_*` kernels.
_MEMORY: tuple[Rule, ...] = (
    (r"^\s*(?:hip|cuda)?mem(?:cpy|set)\b", "memory", None),  # Memcpy DtoD (Device -> Device), Memset (Device)
    (r"^__amd_rocclr_(?:copy|fill)", "memory", None),
)

# 2. Communication. Before every compute class: fused all-reduce kernels also contain norm words
#    (`rmsNormLamport`, `allreduce_fusion_kernel_*` doing add+RMSNorm), DeepEP/MoE all-to-all kernels
#    contain `moe`/`dispatch`, and NCCL names contain `Sum_bf16` etc.
#    NCCL names: the collective is reliable, `_RING_LL` is not (kineto-traces.md §3 pitfall).
_NCCL = r"(?:nccl|rccl)\w*?Kernel_"


def _word(lower: str, camel: str) -> str:
    """Case-sensitive `lower` not preceded by a lower-case letter, or `camel` not after warp/block."""
    return rf"(?-i:(?<![a-z]){lower}|(?<![Ww]arp)(?<![Bb]lock){camel})"


_COMMUNICATION: tuple[Rule, ...] = (
    (_NCCL + r"AllReduce", "communication", "all_reduce"),
    (_NCCL + r"AllGather", "communication", "all_gather"),
    (_NCCL + r"ReduceScatter", "communication", "reduce_scatter"),
    (_NCCL + r"Broadcast", "communication", "broadcast"),
    (_NCCL + r"(?:SendRecv|Send|Recv)", "communication", "send_recv"),
    (_NCCL + r"(?:AllToAll|AlltoAll)", "communication", "all_to_all"),
    # ncclDevKernel_Generic and `Reduce` (to a root) have no collective in COLLECTIVES.
    (r"^(?:void\s+)?(?:nccl|rccl)\w*Kernel", "communication", None),
    # vLLM/SGLang custom all-reduce (one kernel per stage) and its all-gather sibling.
    (r"cross_device_reduce_\w*stage", "communication", "all_reduce"),
    (r"cross_device_all_gather", "communication", "all_gather"),
    # DeepEP (namespace deep_ep::{intranode,internode,internode_ll}) and pplx/TRT-LLM a2a: dispatch and
    # combine are the expert-parallel all-to-all; other deep_ep kernels (layout, notify) are its bookkeeping.
    (r"deep_ep::\w+::(?:dispatch|combine)\b", "communication", "all_to_all"),
    (r"deep_ep::", "communication", None),
    (r"mooncake.*(?:dispatch|combine)", "communication", "all_to_all"),
    (r"mooncake", "communication", None),
    # FlashInfer/TRT-LLM Lamport all-reduce fusion: the MNNVL tail `rmsNormLamport` is part of the AR op.
    (r"lamport\w*all_?gather", "communication", "all_gather"),
    (r"lamport", "communication", "all_reduce"),  # allreduce_fusion_kernel_*_lamport, rmsNormLamport
    # Generic collective words (torch symmetric memory `multimem_all_reduce_kernel`,
    # `one_shot_all_reduce_kernel`, SGLang `all_reduce_one_shot_push_kernel`, TRT-LLM
    # `oneshotAllreduceFusionKernel`). Case-sensitive: a lower-case `all` must start a word (so
    # `small_reduce` is not one), a capital `All` may follow camelCase (`oneshotAllreduce`), but
    # warp/block all-reduce are device helpers, not collectives.
    (_word("all_?reduce", "All_?[Rr]educe"), "communication", "all_reduce"),
    # torch symm-mem `multimem_one_shot_reduce_kernel` serves multimem_one_shot_all_reduce (root -1).
    (r"multimem_\w*reduce", "communication", "all_reduce"),
    (_word("all_?gather", "All_?[Gg]ather"), "communication", "all_gather"),
    (r"reduce_?scatter", "communication", "reduce_scatter"),
    (_word("all_?to_?all", "All_?[Tt]o_?[Aa]ll"), "communication", "all_to_all"),
    (r"(?<![a-z])a2a_?\w*(?:dispatch|combine)|moe_?a2a", "communication", "all_to_all"),
)

# 3. MoE. Before attention/GEMM/activation: expert GEMMs are GEMMs with `swiglu`/`Marlin` in the name,
#    and triton_kernels' `_topk_forward` is router top-k, not sampling.
_MOE: tuple[Rule, ...] = (
    (r"moe|expert", "moe", None),  # fused_moe_kernel, moe::dev::routing::*, moe_align_block_size, *_moe_forward_*
    # triton_kernels (gpt-oss on MI300X): matmul_ogs = expert matmul with gather/scatter; routing helpers.
    (r"_?matmul_ogs|_finalize_matmul_scatter|_combined_routing|_sum_bitmatrix|^_topk_forward$", "moe", None),
    # TRT-LLM-gen batched GEMM with dynamic batch = expert GEMM (cpu_op vllm::moe_forward on the b200 trace).
    (r"^bmm_\w*dynBatch", "moe", None),
    (r"topkGating|grouped_topk|fused_gate|routingRenormalize|(?<![a-z])ep_(?:scatter|gather)", "moe", None),
    (r"aiter(?:::|\d+)topksoftmax", "moe", None),  # AITER asm router top-k softmax
)

# 4. Attention. Before GEMM: FA3 is `cutlass::device_kernel<flash::...FlashAttnFwdSm90...>` (a GEMM
#    rule on `cutlass` would take it, kineto-traces.md §4 pitfall 12). Do NOT match bare `flashinfer`:
#    it is a namespace for norm, activation, sampling and all-reduce kernels too.
_ATTENTION: tuple[Rule, ...] = (
    (r"flash::|flash_fwd|flash_bwd|FlashAttn|flash_?attn|flash_?mla|fmha|mha_(?:fwd|bwd|batch)", "attention", None),
    # FlashInfer: Batch/Single Prefill/Decode, the Hopper `PrefillWithKVCacheKernel` / `FP8PrefillWith…`,
    # MLA, cascade `MergeState[s|InPlace]Kernel` (flashinfer include/flashinfer/attention/*.cuh).
    (r"(?:Prefill|Decode)With\w*KVCache|BatchMLA|MergeState", "attention", None),
    # SageAttention (`sage_fwd` in a diffusion trace, issue 9; its Triton kernels are `_attn_fwd`, below).
    (r"(?<![a-z])sage_?(?:attn|fwd|bwd)|sageattn", "attention", None),
    # AITER hand-written asm: paged attention `pa_*` and MLA decode `mla_a16w16_*` (symbols `_ZN5aiter<len>pa_…E`).
    (r"aiter(?:::|\d+)(?:pa|mla)_", "attention", None),
    (r"paged_attention|unified_attention|attention|attn_fwd|attn_bwd|merge_attn_states|_decode_att", "attention", None),
    (r"(?:^|[^a-z])mla_(?:decode|prefill|fwd)", "attention", None),  # MLA decode/prefill kernels (AITER, vLLM)
    # Sparse MLA / DSA attention (DeepSeek-V3.2/V4, GLM-5): vLLM's SM12x Triton `_fused_gather_dequant_attn_kernel`
    # (vllm#54929; "dequant" in its name is not a cast kernel), ROCm `_sparse_attn_decode_ragged_kernel` (vllm#44899)
    (r"_fused_gather_dequant_attn|sparse_?(?:mla|attn)", "attention", None),
    # Triton decode/extend attention (SGLang/vLLM): _fwd_kernel, _fwd_grouped_kernel_stage1, _fwd_kernel_stage2.
    (r"^_fwd_(?:grouped_)?kernel(?:_stage\d)?$|^reduce_segments$", "attention", None),
    # KV-cache writes and attention metadata belong to the attention layer (vLLM runs reshape_and_cache
    # inside unified_attention_with_output; FlashInfer page-index builders feed the attention kernel).
    (r"reshape_and_cache|concat_and_cache|store_kvcache|_copy_page_indices|kv_indices", "attention", None),
)

# 5. GEMM. cuBLAS/cuBLASLt (incl. split-K reduce and gemv), nvjet, CUTLASS, hipBLASLt/Tensile (`Cijk_`),
#    Composable Kernel, Marlin/machete, DeepGEMM, Triton matmul. `fbgemm_gpu::` is a library namespace
#    (embedding, permute, quantize kernels), not a GEMM. Convolutions (cuDNN/MIOpen implicit GEMM,
#    winograd, dgrad/wgrad engines) count as gemm: there is no conv class and they are tensor-core math.
_GEMM: tuple[Rule, ...] = (
    (r"(?<!fb)gemm|gemv|nvjet|xmma|^Cijk_|cutlass\w*tensorop|marlin|machete|matmul|^bmm_", "gemm", None),
    (r"^triton_tem_fused_\w*mm", "gemm", None),  # Inductor max-autotune GEMM templates (mm, addmm, bmm)
    (r"splitKreduce|scudnn|hcudnn|convolve_sgemm|igemm_|winograd|dgrad_engine|wgrad_alg\d_engine", "gemm", None),
    # cuBLASLt's separate epilogue pass (bias/activation/split-K output of a matmul): part of the GEMM.
    (r"^(?:void\s+)?epilogue::impl::", "gemm", None),
    # cuDNN FFT convolution: forward/inverse FFT tiles around a pointwise complex GEMM.
    (r"^(?:void\s+)?fft[12]d_(?:r2c|c2r|c2c)", "gemm", None),
)

# 6. Norm. Before cast: `add_rmsnorm_quant_kernel` quantizes its output, and vLLM's
#    `fused_add_rms_norm_kernel<..._typeConvert...>` mentions a type conversion; both are norms.
#    Inductor names RMSNorm by its ops (mean, pow, rsqrt).
_NORM: tuple[Rule, ...] = (
    (r"rms_?norm|layer_?norm|group_?norm|batch_?norm|instance_?norm|qk_?norm", "norm", None),
    (r"GammaBetaBackward|RowwiseMoments|ComputeInvStd|cudnn::bn_(?:fw|bw)", "norm", None),
    (r"^triton_\w*fused\w*(?:mean|var)\w*rsqrt", "norm", None),
)

# 7. Rotary, then activation (a fused `silu_and_mul_quant` is an activation, so both precede cast).
_ROTARY: tuple[Rule, ...] = (
    (r"rotary|(?<!p)rope(?!rt)", "rotary", None),  # rotary_embedding_kernel, apply_rope, mrope; not `property`
)
_ACTIVATION: tuple[Rule, ...] = (
    (r"silu|gelu|swiglu|geglu|act_and_mul|_and_mul_kernel|swish", "activation", None),
    (r"threshold_kernel", "activation", None),  # PyTorch's ReLU (forward and backward) is threshold
)

# 8. Sampling. argmax (greedy), FlashInfer/vLLM samplers, multinomial. Softmax only in its large-dim
#    form `cunn_SoftMax*` (the vocab); `softmax_warp_*` serves rows <= 1024 wide, i.e. not the vocab.
_SAMPLING: tuple[Rule, ...] = (
    (r"ArgMax|argmax|sampling|Sampling|sampleMultinomial|multinomial|top_?k_?top_?p|min_?p_?sampling", "sampling", None),
    (r"cunn_SoftMax", "sampling", None),
)

# 9. Cast by name: only kernels whose name states a dtype conversion or (de)quantization. Quantize
#    kernels stay `cast` (a quantization finding can split them later). Everything else that copies
#    becomes `cast` only through op linkage (aten::copy_/_to_copy/to), see classify.py.
#    `direct_copy_kernel_cuda` is deliberately absent: same-dtype copies use it too.
_CAST: tuple[Rule, ...] = (
    (r"quant", "cast", None),  # scaled_fp8_quant, per_token_group_quant, quantize_with_block_size, dequant*
    (r"(?:^|[\s:_])cvt_|(?:^|[\s:])convert_|fp8_copy|bfloat16_copy|bfloat16tofloat32_copy|half_copy", "cast", None),
    (r"^triton_\w+_fused__to_copy_\d+$", "cast", None),  # Inductor kernel whose only op is _to_copy
    # `<dtype>..._to_<dtype>` conversions such as fbgemm `_FP8rowwise_to_float_cuda_kernel`.
    (r"(?:float|half|bf16|fp8|fp16|fp32)\w*?_to_(?:float|half|bf16|bfloat16|hfp8|fp8|fp16|fp32|fp4)", "cast", None),
)

RULES: tuple[Rule, ...] = (
    _MEMORY + _COMMUNICATION + _MOE + _ATTENTION + _GEMM + _NORM + _ROTARY + _ACTIVATION + _SAMPLING + _CAST
)

# ---------------------------------------------------------------- the rules as one Polars (Rust regex) prefilter
# A name that contains no match of any rule's superset pattern is "other" without asking Python's `re` (issue 30.2:
# 2 M distinct kernel names took 70 s one `classify_name` call each). The superset of a rule is its pattern with
# every lookaround and `$` dropped (an assertion only rejects matches, so dropping it keeps every match), searched in
# the whole name, not its head: the head is a prefix of the name followed by a space or `(`, so a match in the head
# is one in the name (`\b` at the head's end holds in both). Exact only on printable-ASCII text, where `\w`, `\d`,
# `\s`, `\b`, `.` and case folding mean the same in Python's `re` and Rust's `regex` (Unicode `\s` and `\w` differ:
# Python counts U+001C and `½` in); any other name is classified by `classify_name`.
PRINTABLE_ASCII = " -~"  # the character range
_CATEGORIES = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
               "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}


def superset_pattern(pattern: str) -> str:
    """`pattern` (Python `re`, compiled IGNORECASE) as a Rust-regex pattern matching at least where it matches, on
    printable-ASCII text: lookarounds and `$` dropped, all else as written. Raises ValueError on a construct it does
    not translate (a rule using one must get a translation, not a guess)."""
    return "(?i:" + _emit(re._parser.parse(pattern, re.IGNORECASE)) + ")"  # type: ignore[attr-defined]


def _char(code: int) -> str:
    if code > 0x7E or code < 0x20:
        raise ValueError(f"non-printable-ASCII literal U+{code:04X}: its case folding differs between engines")
    return chr(code) if chr(code).isalnum() else f"\\x{{{code:02X}}}"


def _emit(tree: Any) -> str:
    c = re._constants  # type: ignore[attr-defined]
    out = []
    for op, av in tree:
        if op is c.LITERAL:
            out.append(_char(av))
        elif op is c.ANY:
            out.append(".")
        elif op is c.IN:
            out.append(_class(av))
        elif op is c.BRANCH:
            out.append("(?:" + "|".join(_emit(b) for b in av[1]) + ")")
        elif op is c.SUBPATTERN:
            _group, add, remove, body = av
            if (add | remove) & ~re.IGNORECASE:
                raise ValueError(f"inline flags {add}/{remove} not translated")
            flags = "i" if add & re.IGNORECASE else "-i" if remove & re.IGNORECASE else ""
            out.append(f"(?{flags}:" + _emit(body) + ")")
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):  # lazy or greedy: the same set of strings has a match
            low, high, body = av
            out.append(f"(?:{_emit(body)}){{{low},{'' if high == c.MAXREPEAT else high}}}")
        elif op in (c.ASSERT, c.ASSERT_NOT) or (op is c.AT and str(av) == "AT_END"):
            continue  # dropped: superset
        elif op is c.AT and str(av) in ("AT_BEGINNING", "AT_BOUNDARY"):
            out.append({"AT_BEGINNING": "^", "AT_BOUNDARY": r"\b"}[str(av)])
        else:
            raise ValueError(f"regex construct {op} {av} not translated")
    return "".join(out)


def _class(items: Any) -> str:
    c = re._constants  # type: ignore[attr-defined]
    parts: list[str] = []
    for op, av in items:
        if op is c.NEGATE:
            parts.insert(0, "^")
        elif op is c.LITERAL:
            parts.append(_char(av))
        elif op is c.RANGE:
            parts.append(_char(av[0]) + "-" + _char(av[1]))
        elif op is c.CATEGORY and str(av) in _CATEGORIES:
            parts.append(_CATEGORIES[str(av)])
        else:
            raise ValueError(f"character class item {op} {av} not translated")
    return "[" + "".join(parts) + "]"


def rules_superset() -> str:
    """One Rust-regex pattern: the superset patterns of every rule as alternatives (`superset_pattern`)."""
    return "|".join(superset_pattern(pattern) for pattern, _, _ in RULES)

# ---------------------------------------------------------------- the launching CPU op of a collective
# CPU-side ops (cpu_op / user_annotation rows) that launch communication kernels; the op, not the kernel
# name, says which collective runs: NCCL >= 2.19 and RCCL name kernels `ncclDevKernel_Generic`, and NCCL
# runs all-to-all as `ncclKernel_SendRecv_*`. Real names (shared/traces hta/*, tracelens/b200):
# `nccl:all_reduce`, `nccl:_all_gather_base`, `nccl:all_to_all`, `nccl:_reduce_scatter_base`,
# `c10d::allreduce_`, `c10d::alltoall_base_`, `record_param_comms` (collective in its args),
# `vllm::all_reduce`, `symm_mem::multimem_all_reduce_`, `vllm::all_gather`. `aten::` ops are never
# collectives (`aten::broadcast_tensors`).
COMM_OP_PATTERN = (
    r"^(?:nccl:|rccl:|c10d::|_?c10d_functional::|record_param_comms$)"
    r"|^\w+::\w*(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast)"
)
NOT_COMM_OP_PREFIX = "aten::"  # Polars regexes have no look-ahead: excluded separately
RECORD_PARAM_COMMS = "record_param_comms"

# Letters of an op name or a `Collective name` arg (namespace and `nccl:` cut, lower-case, `_` removed)
# → collective; first match wins. `reduce` (to one root) last, so `allreduce` never reads as it.
_OP_COLLECTIVES: tuple[tuple[str, str], ...] = (
    (r"allreduce", "all_reduce"),
    (r"reducescatter", "reduce_scatter"),
    (r"allgather", "all_gather"),
    (r"alltoall", "all_to_all"),
    (r"broadcast", "broadcast"),
    (r"^(?:batch)?i?(?:send|recv)", "send_recv"),
    (r"^reduce$", "reduce"),
)


def op_collective(name: str | None) -> str | None:
    """The collective an op name or a `Collective name` arg stands for; None when it is none of them
    (`barrier`, `gather`, `scatter`, an unrelated op)."""
    if not name:
        return None
    tail = name.rsplit("::", 1)[-1].rsplit(":", 1)[-1]
    letters = re.sub(r"[^a-z]", "", tail.lower())
    for pattern, collective in _OP_COLLECTIVES:
        if re.search(pattern, letters):
            return collective
    return None


# `dtype` args (PyTorch ScalarType names as record_param_comms writes them, lower-cased, and the C++ spellings) →
# their dtype in units.BYTES_PER_ELEMENT (element sizes: c10/core/ScalarType.h), for message sizes.
_DTYPE_NAMES: dict[str, str] = {
    "float": "fp32", "float32": "fp32", "double": "fp64", "float64": "fp64", "half": "fp16", "float16": "fp16",
    "bfloat16": "bf16", "long": "int64", "int64": "int64", "int": "int32", "int32": "int32", "short": "int16",
    "int16": "int16", "char": "int8", "int8": "int8", "signed char": "int8", "byte": "uint8", "uint8": "uint8",
    "unsigned char": "uint8", "bool": "bool", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "complexhalf": "complex32", "complexfloat": "complex64", "complexdouble": "complex128", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "float8_e8m0fnu": "fp8",
    "float4_e2m1fn_x2": "fp4x2",
}
DTYPE_BYTES: dict[str, int] = {name: int(BYTES_PER_ELEMENT[d]) for name, d in _DTYPE_NAMES.items()}


def dtype_bytes(dtype: str | None) -> int | None:
    """Element size in bytes of a dtype arg (`Float`, `BFloat16`, `c10::Half`); None when unknown."""
    if not dtype:
        return None
    key = dtype.strip().lower().removeprefix("c10::").removeprefix("at::")
    return DTYPE_BYTES.get(key)
