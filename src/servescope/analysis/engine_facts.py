"""How a trace's engine ran, summed up for telling what changed between two traces (`engine_facts`).

Does: take the calibration rank's decode steps (all its steps when it has none) and count, per step, launch calls,
graph launches, kernels and norm kernels; name the all-reduce implementation of each all-reduce kernel (NCCL,
custom one-shot / two-shot, symmetric memory, fused all-reduce + RMSNorm), the dtype each GEMM kernel multiplies
(from its name, else from its launching op's shapes), and the drafter / verify kernels of speculative decoding;
record the rank count, world size and collective group sizes. Kernel names come from the representative step of
each summed kind (analysis.timeline: every kernel of one step), else from the steps' top kernels.
Does not: say which mitigation a change is (servescope.planner.applied does) or read files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from servescope.analysis.breakdown import StepBreakdown, TraceBreakdown

KNOWN_SHARE = 0.5  # below this share of GEMM time with a dtype from the names, the ops' shapes are asked

# Drafter / verification kernels of vLLM (v1 spec decode: eagle input prep, rejection sampler) and SGLang (EAGLE
# tree build / verify, tree sampling); the draft model's own forward runs the target's kernel names.
SPEC_KERNEL = re.compile(
    r"eagle|draft|spec_?decod|speculative|rejection_\w*sample|sample_recovered_tokens|verify_tree|build_tree|"
    r"tree_speculative|medusa|(?<![a-z])mtp(?![a-z])", re.IGNORECASE)
# All-reduce kernels by implementation, first match wins (names: analysis/rules.py's communication rules).
ALLREDUCE_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fused all-reduce + RMSNorm", re.compile(r"allreduce_?fusion|lamport|fused_?all_?reduce", re.IGNORECASE)),
    ("custom one-shot", re.compile(r"1stage|one_?shot", re.IGNORECASE)),
    ("custom two-shot", re.compile(r"2stage|two_?shot", re.IGNORECASE)),
    ("symmetric memory", re.compile(r"multimem", re.IGNORECASE)),
    ("NCCL", re.compile(r"nccl|rccl", re.IGNORECASE)),
)
# GEMM kernel names by the dtype they multiply, first match wins: CUTLASS/cuBLAS `e4m3`, `bf16bf16`, `sgemm`,
# Marlin/Machete (4-bit weights), hipBLASLt/Tensile `Cijk_…_BBS` (bf16) / `_HHS` (fp16) / `_F8…` / `_SS…`.
GEMM_DTYPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp4", re.compile(r"e2m1|nvfp4|mxfp4|fp4|f4f4", re.IGNORECASE)),
    ("int4", re.compile(r"marlin|machete|w4a16|w4a8|int4|awq|gptq", re.IGNORECASE)),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8|float8|deep_?gemm|^Cijk_\w*?_(?:F8|B8)", re.IGNORECASE)),
    ("int8", re.compile(r"int8|i8i8|s8s8|imma|^Cijk_\w*?_I8", re.IGNORECASE)),
    ("16-bit", re.compile(r"bf16|bfloat16|fp16|f16f16|h16|hgemm|h884|h1688|s16816|^Cijk_\w*?_(?:BB|HH|BS|HS)",
                          re.IGNORECASE)),
    ("fp32", re.compile(r"sgemm|f32f32|ffma|tf32|^Cijk_\w*?_SS", re.IGNORECASE)),
)
_SHAPE_DTYPE = {"bf16": "16-bit", "fp16": "16-bit", "fp8": "fp8", "fp4": "fp4", "int4": "int4", "int8": "int8",
                "fp32": "fp32"}
GEMM_CLASSES = ("gemm", "moe")


@dataclass(frozen=True)
class EngineFacts:
    """How one trace's engine ran, per step of the steps summed up (`step_kind`: decode, or all steps)."""

    source: str
    step_kind: str
    steps: int
    ranks: int
    world_size: int | None
    group_size: int | None  # the largest collective process-group size seen
    launches_per_step: float
    graph_launches_per_step: float
    kernels_per_step: float
    norm_calls_per_step: float
    tokens_per_seq: float | None  # decode steps' tokens / batch, when both are recorded
    collectives: tuple[str, ...]
    allreduce_us: Mapping[str, float] = field(default_factory=dict)  # all-reduce kernel µs by ALLREDUCE_KINDS
    allreduce_names: Mapping[str, str] = field(default_factory=dict)  # an example kernel name per kind
    gemm_us: Mapping[str, float] = field(default_factory=dict)  # GEMM/MoE kernel µs by dtype (GEMM_DTYPES)
    gemm_from: str = "kernel names"  # kernel names | op shapes
    spec_kernels: tuple[str, ...] = ()


def _short(name: str) -> str:
    """A kernel's function name for evidence: no `void`, namespaces, template arguments or parameters."""
    head = re.split(r"[<(]", name.removeprefix("void "), maxsplit=1)[0].strip()
    return head.rsplit("::", 1)[-1] or name[:60]


def _first(patterns: Sequence[tuple[str, re.Pattern[str]]], name: str) -> str | None:
    return next((label for label, p in patterns if p.search(name)), None)


def _add(into: dict[str, float], key: str, us: float) -> None:
    into[key] = into.get(key, 0.0) + us


def _kernel_names(rank: TraceBreakdown, steps: Sequence[StepBreakdown]) -> dict[str, tuple[float, str, str | None]]:
    """name → (µs, class, collective): every kernel of the representative step of each summed kind (timelines),
    else the steps' top kernels summed over the steps; shares are taken within one of the two, never across."""
    kinds = {s.kind for s in steps}
    names: dict[str, tuple[float, str, str | None]] = {}
    for t in rank.timelines:
        if t.kind in kinds:
            for nm, us, cls, coll in zip(t.name, t.dur_us, t.kernel_class, t.collective, strict=True):
                names[nm] = (names.get(nm, (0.0,))[0] + us, cls, coll)
    if not names:
        for s in steps:
            for k in s.top_kernels:
                names[k.name] = (names.get(k.name, (0.0,))[0] + k.total_us, k.kernel_class, k.collective)
    return names


def _gemm_dtypes(names: Mapping[str, tuple[float, str, str | None]],
                 steps: Sequence[StepBreakdown]) -> tuple[dict[str, float], str]:
    """GEMM/MoE kernel µs by dtype from the names; from the ops' shapes when the names leave most unknown."""
    gemm: dict[str, float] = {}
    for nm, (us, cls, _) in names.items():
        if cls in GEMM_CLASSES:
            _add(gemm, _first(GEMM_DTYPES, nm) or "?", us)
    if sum(v for k, v in gemm.items() if k != "?") >= KNOWN_SHARE * sum(gemm.values()):
        return gemm, "kernel names"
    shaped: dict[str, float] = {}
    for s in steps:
        for w in s.work:
            if w.kernel_class in GEMM_CLASSES and w.dtype in _SHAPE_DTYPE:
                _add(shaped, _SHAPE_DTYPE[w.dtype], w.dur_us)
    return (shaped, "op shapes") if shaped else (gemm, "kernel names")


def engine_facts(ranks: Sequence[TraceBreakdown], rank: TraceBreakdown, source: str) -> EngineFacts:
    """The facts of `rank`'s decode steps (all its steps when it has none), among `ranks` (every rank of the
    trace); `source` is the trace's path (module docstring)."""
    decode = [s for s in rank.steps if s.kind == "decode"]
    steps: list[StepBreakdown] = decode or list(rank.steps)
    n = max(len(steps), 1)
    names = _kernel_names(rank, steps)
    allreduce: dict[str, float] = {}
    examples: dict[str, str] = {}
    for nm, (us, _, coll) in names.items():
        if coll == "all_reduce":
            label = _first(ALLREDUCE_KINDS, nm) or "other"
            _add(allreduce, label, us)
            examples.setdefault(label, _short(nm))
    gemm, gemm_from = _gemm_dtypes(names, steps)
    groups = [c.group_size for s in steps for c in s.collectives.values() if c.group_size]
    world = [b.world_size for b in ranks if b.world_size]
    seqs = [(s.tokens, s.batch_size) for s in decode if s.tokens and s.batch_size]
    devices = max(1, max((s.devices for s in steps), default=1))
    return EngineFacts(
        source=source, step_kind="decode" if decode else "all", steps=len(steps), ranks=len(ranks),
        world_size=max(world) if world else None, group_size=max(groups) if groups else None,
        launches_per_step=sum(s.launches for s in steps) / n,
        graph_launches_per_step=sum(s.graph_launches for s in steps) / n,
        kernels_per_step=sum(s.kernels for s in steps) / n / devices,
        norm_calls_per_step=sum(s.class_calls.get("norm", 0) for s in steps) / n,
        tokens_per_seq=sum(t for t, _ in seqs) / sum(b for _, b in seqs) if seqs else None,
        collectives=tuple(sorted({c for s in steps for c in s.collectives})),
        allreduce_us=allreduce, allreduce_names=examples, gemm_us=gemm, gemm_from=gemm_from,
        spec_kernels=tuple(sorted(nm for nm in names if SPEC_KERNEL.search(nm))),
    )
