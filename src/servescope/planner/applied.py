"""Which of a plan's tracks were applied, found from what changed between a before and an after trace.

Does: compare two traces' engine facts (servescope.analysis.engine_facts, seen here through the `EngineView`
protocol: the planner does not import the analysis) and name each track a change stands for, with the evidence
that named it (`found_changes`):
  cuda_graphs           graph launches appear (none before), or launch calls per step fall ≥ GRAPH_LAUNCH_FALL×
                        while the kernels per step fall < 2× (the kernels still run, launched by graph replays);
  speculative_decoding  drafter / verify kernels appear (EAGLE input prep, rejection sampling, tree build /
                        verify), or decode steps start to carry several tokens per sequence;
  custom_allreduce      the all-reduce kernels turn from NCCL to a custom one (cross_device_reduce_1stage /
                        _2stage: one-shot / two-shot, one_shot / two_shot, symmetric memory `multimem`);
  collective_fusion     the all-reduce becomes a fused all-reduce + RMSNorm kernel (allreduce_fusion, Lamport), or
                        norm kernels per step fall to ≤ NORM_FALL of before while an all-reduce runs on both sides;
  quantization          the dtype holding most GEMM time changes to a narrower one;
  parallelism_change    the rank count, world size or collective group size changes;
  expert_parallel       all-to-all collectives appear (expert dispatch / combine).
A change the other way (graphs gone, a wider GEMM dtype) is returned apart (`reverse`): it is not the track.
Does not: measure, or infer anything from benchmark files or typed figures, which do not say how the engine ran
(verify asks for `--applied` then).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

GRAPH_LAUNCH_FALL = 4.0  # eager → graphs: vLLM decode goes from ~1 launch per kernel to a few graph launches
NORM_FALL = 0.7  # fused add+RMSNorm removes one norm per all-reduce (two per layer); 30 % fewer is not noise
DOMINANT_SHARE = 0.5  # a dtype or all-reduce kind "holds" a side when it has at least half of the known time
CUSTOM_ALLREDUCE = ("custom one-shot", "custom two-shot", "symmetric memory")  # analysis.engine_facts' kinds
FUSED_ALLREDUCE = "fused all-reduce + RMSNorm"
BITS = {"fp32": 32, "16-bit": 16, "fp8": 8, "int8": 8, "fp4": 4, "int4": 4}  # analysis.engine_facts' GEMM dtypes


class EngineView(Protocol):
    """What verify reads of a trace's engine facts (analysis.engine_facts.EngineFacts)."""

    @property
    def ranks(self) -> int: ...
    @property
    def world_size(self) -> int | None: ...
    @property
    def group_size(self) -> int | None: ...
    @property
    def launches_per_step(self) -> float: ...
    @property
    def graph_launches_per_step(self) -> float: ...
    @property
    def kernels_per_step(self) -> float: ...
    @property
    def norm_calls_per_step(self) -> float: ...
    @property
    def tokens_per_seq(self) -> float | None: ...
    @property
    def collectives(self) -> tuple[str, ...]: ...
    @property
    def allreduce_us(self) -> Mapping[str, float]: ...
    @property
    def allreduce_names(self) -> Mapping[str, str]: ...
    @property
    def gemm_us(self) -> Mapping[str, float]: ...
    @property
    def gemm_from(self) -> str: ...
    @property
    def spec_kernels(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class Found:
    """A track found applied, and the evidence (before → after) that named it."""

    kind: str
    evidence: str


# --- what changed ------------------------------------------------------------------------------------------------

def _holder(us: Mapping[str, float], skip: Iterable[str] = ("?", "other")) -> str | None:
    """The key with at least DOMINANT_SHARE of the time, None when none has or nothing is known."""
    total = sum(us.values())
    known = {k: v for k, v in us.items() if k not in skip}
    if not known or total <= 0:
        return None
    key = max(known, key=lambda k: known[k])
    return key if known[key] >= DOMINANT_SHARE * total else None


def _share(us: Mapping[str, float], key: str) -> str:
    total = sum(us.values())
    return f"{key} {100 * us.get(key, 0.0) / total:.0f}%" if total > 0 else key


def _graphs(b: EngineView, a: EngineView) -> str | None:
    appeared = b.graph_launches_per_step == 0 < a.graph_launches_per_step
    fell = (a.launches_per_step * GRAPH_LAUNCH_FALL <= b.launches_per_step
            and a.kernels_per_step * 2 > b.kernels_per_step > 0)
    if not (appeared or fell):
        return None
    return (f"graph launches {b.graph_launches_per_step:,.1f} → {a.graph_launches_per_step:,.1f} per step, launch "
            f"calls {b.launches_per_step:,.0f} → {a.launches_per_step:,.0f} per step (kernels "
            f"{b.kernels_per_step:,.0f} → {a.kernels_per_step:,.0f})")


def _speculation(b: EngineView, a: EngineView) -> str | None:
    new = [k for k in a.spec_kernels if k not in b.spec_kernels]
    if new and not b.spec_kernels:
        more = f" and {len(new) - 3} more" if len(new) > 3 else ""
        return f"drafter / verify kernels appeared: {', '.join(new[:3])}{more}"
    if a.tokens_per_seq and a.tokens_per_seq > 1.05 and (b.tokens_per_seq or 1.0) <= 1.05:
        return (f"decode steps carry {a.tokens_per_seq:.2f} tokens per sequence (before "
                f"{b.tokens_per_seq or 1.0:.2f}): several tokens verified per step")
    return None


def _allreduce_change(b: EngineView, a: EngineView, to: Sequence[str]) -> str | None:
    was, now = _holder(b.allreduce_us), _holder(a.allreduce_us)
    if now is None or was is None or now not in to or was == now:
        return None
    return (f"all-reduce kernels {_share(b.allreduce_us, was)} ({b.allreduce_names.get(was, '')}) → "
            f"{_share(a.allreduce_us, now)} ({a.allreduce_names.get(now, '')})")


def _custom_allreduce(b: EngineView, a: EngineView) -> str | None:
    return _allreduce_change(b, a, CUSTOM_ALLREDUCE) if _holder(b.allreduce_us) == "NCCL" else None


def _fusion(b: EngineView, a: EngineView) -> str | None:
    fused = _allreduce_change(b, a, (FUSED_ALLREDUCE,))
    if fused:
        return fused
    both = b.allreduce_us and a.allreduce_us
    if both and b.norm_calls_per_step >= 4 and a.norm_calls_per_step <= NORM_FALL * b.norm_calls_per_step:
        return (f"norm kernels {b.norm_calls_per_step:,.0f} → {a.norm_calls_per_step:,.0f} per step, an all-reduce "
                "on both sides (add + RMSNorm fused)")
    return None


def _quantization(b: EngineView, a: EngineView) -> str | None:
    was, now = _holder(b.gemm_us), _holder(a.gemm_us)
    if was not in BITS or now not in BITS or BITS[now] >= BITS[was]:
        return None
    how = b.gemm_from if b.gemm_from == a.gemm_from else f"{b.gemm_from} / {a.gemm_from}"
    return f"GEMM time by dtype {_share(b.gemm_us, was)} → {_share(a.gemm_us, now)} (from {how})"


def _parallelism(b: EngineView, a: EngineView) -> str | None:
    for what, x, y in (("world size", b.world_size, a.world_size), ("ranks", b.ranks, a.ranks),
                       ("collective group size", b.group_size, a.group_size)):
        if x and y and x != y:
            return f"{what} {x} → {y}"
    return None


def _expert_parallel(b: EngineView, a: EngineView) -> str | None:
    if "all_to_all" in a.collectives and "all_to_all" not in b.collectives:
        return "all-to-all collectives appeared (expert dispatch / combine)"
    return None


DETECTORS: tuple[tuple[str, Callable[[EngineView, EngineView], str | None]], ...] = (
    ("cuda_graphs", _graphs),
    ("speculative_decoding", _speculation),
    ("custom_allreduce", _custom_allreduce),
    ("collective_fusion", _fusion),
    ("quantization", _quantization),
    ("parallelism_change", _parallelism),
    ("expert_parallel", _expert_parallel),
)
SYMMETRIC = ("parallelism_change",)  # a layout change has no "other way"


def found_changes(before: EngineView, after: EngineView) -> tuple[tuple[Found, ...], tuple[Found, ...]]:
    """(tracks that `after` applied over `before`, with evidence; changes that run the other way)."""
    forward = tuple(Found(k, e) for k, f in DETECTORS if (e := f(before, after)))
    reverse = tuple(Found(k, e) for k, f in DETECTORS if k not in SYMMETRIC and (e := f(after, before)))
    return forward, reverse
