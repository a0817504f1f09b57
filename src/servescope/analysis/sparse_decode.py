"""The sparse-attention decode kernel of DeepSeek-V3.2/V4 and GLM-5 (DSA, sparse MLA), found by name and by shape,
and the finding that names its grid collapse with a split-K what-if.

Does: on a decode step, a kernel whose name is a sparse-MLA / DSA decode kernel (`SPARSE_DECODE`; the split path
itself — split/partial/combine/reduce — excluded) that launches fewer CTAs than the GPU has SMs (the grid
(tokens, ⌈heads / head tile⌉) collapses to one CTA per sequence when a rank holds ≤ 16 heads) and takes at least
LOW_OCC_MIN_SHARE of the kind's GPU busy time gives `sparse_decode_grid_collapse`: "1 CTAs on 170 SMs: 1% of SMs
busy", the kernel's share, the top-k index stream beside it when the step runs one (the DSA indexer's logits / top-k
kernels), and the split-K what-if that `Peaks.split_k` prices (perfmodel.split_k through advise: the best S, µs per
call, the combine's part, every S tried); without a pricer the what-if is left out and the finding says why.
Does not: price anything itself (analysis reads no specs), or the plan (planner.split_k_track does).
"""

from __future__ import annotations

import re

from servescope.analysis.breakdown import TraceBreakdown
from servescope.analysis.breakdown_records import KernelStats, KindSummary
from servescope.analysis.findings import LOW_OCC_MIN_SHARE, Finding
from servescope.analysis.launch import SplitPricer, SplitWhatIf, geometry

# The engines' sparse decode kernels by name: vLLM's SM12x Triton sparse-MLA kernel (#54929), its ROCm DeepSeek-V4
# decode kernel (#44899), FlashMLA's sparse decode and other sparse-MLA / DSA attention kernels
SPARSE_DECODE = re.compile(r"_fused_gather_dequant_attn|sparse.*(mla|attn).*decode|decode.*sparse|flash_?mla.*sparse|"
                           r"sparse_?mla|dsa.*attn", re.I)
_ALREADY_SPLIT = re.compile(r"split|partial|combine|reduce", re.I)
# A top-k index stream in the same step: the DSA indexer's logits and top-k kernels
_INDEX_STREAM = re.compile(r"topk|top_k|indexer|mqa_logits|index_score", re.I)


def is_sparse_decode(name: str) -> bool:
    """A sparse-MLA / DSA decode kernel by name, not the split path itself."""
    return bool(SPARSE_DECODE.search(name)) and not _ALREADY_SPLIT.search(name)


def sparse_decode_findings(b: TraceBreakdown, pricer: SplitPricer | None) -> list[Finding]:
    """One finding per sparse decode kernel of a decode kind whose grid is smaller than the SMs (module docstring)."""
    if not b.num_sms:
        return []
    return [f for s in b.kinds if s.kind == "decode" for f in _for_kind(s, b, pricer)]


def _for_kind(s: KindSummary, b: TraceBreakdown, pricer: SplitPricer | None) -> list[Finding]:
    sms = int(b.num_sms or 0)
    index = next((k.name for k in s.top_kernels if _INDEX_STREAM.search(k.name)), None)
    out = []
    for k in s.top_kernels:
        share = k.total_us / s.gpu_busy_us if s.gpu_busy_us > 0 else 0.0
        if not is_sparse_decode(k.name) or not k.grid_blocks or k.grid_blocks >= sms or share < LOW_OCC_MIN_SHARE:
            continue
        what_if = pricer(k.name, int(k.grid_blocks), sms, k.median_us * 1e-6) if pricer is not None else None
        out.append(_finding(s, b, k, share, index, what_if))
    return out


def _what_if_text(w: SplitWhatIf | None) -> str:
    if w is None:
        return "no split-K what-if: the GPU or the kernel's loop is not in servescope's specs"
    if w.splits <= 1:
        return "split-K what-if: no S pays (the combine costs more than the tiles it spreads)"
    return (f"split-K what-if: S={w.splits} → {w.time_s * 1e6:,.1f} µs per call from {w.call_s * 1e6:,.1f} µs "
            f"({w.gain:.1f}×; the combine {w.reduce_s * 1e6:.1f} µs of it)")


def _finding(s: KindSummary, b: TraceBreakdown, k: KernelStats, share: float, index: str | None,
             w: SplitWhatIf | None) -> Finding:
    sms, ctas = int(b.num_sms or 0), int(k.grid_blocks or 0)
    launch = geometry(ctas, sms)
    evidence: dict[str, float | int | str | None] = {
        "kernel": k.name, "ctas": ctas, "num_sms": sms, "busy_sm_share": launch.busy_sm_share,
        "share_of_busy": share, "calls": k.calls, "median_us": k.median_us, "index_stream": index}
    if w is not None:
        evidence |= {"engine_kernel": w.label, "split_k": w.splits, "split_k_us": w.time_s * 1e6,
                     "split_k_gain": w.gain, "split_k_reduce_us": w.reduce_s * 1e6, "shape_source": w.source,
                     "split_k_tried_us": ", ".join(f"S={n}: {t * 1e6:.1f}" for n, t in w.tried.items())}
    stream = f", beside the top-k index stream {index[:40]}" if index else ""
    message = (f"the sparse-attention decode kernel takes {share:.1%} of decode GPU busy time with a collapsed grid — "
               f"{launch.describe()}: one CTA per sequence and head block walks all its top-k tiles serially"
               f"{stream}; {_what_if_text(w)} — {k.name[:80]}")
    return Finding("sparse_decode_grid_collapse", "high" if share >= 0.3 else "medium", message, evidence,
                   b.rank, s.kind, ("split_k_attention",))
