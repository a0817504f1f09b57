"""The track list: every mitigation the planner evaluates, by name, in the order plans list them.

Does: map each track kind to the function that proposes its what-if (tracks_comm, tracks_compute, split_k_track,
tracks_kernels, tracks_spec),
and validate names given by a user (`parse_forbid`). `TRACK_KINDS` is derived from the map: one declaration.
Does not: evaluate a track (planner.plan) or decide what pays.
"""

from __future__ import annotations

from collections.abc import Callable

from servescope.errors import PlanError
from servescope.planner.split_k_track import split_k_attention_track
from servescope.planner.track import Context, Proposal
from servescope.planner.tracks_comm import (
    collective_fusion_track,
    custom_allreduce_track,
    expert_parallel_track,
    nccl_tuning_track,
)
from servescope.planner.tracks_compute import (
    async_scheduling_track,
    cuda_graphs_track,
    parallelism_change_track,
    pd_disaggregation_track,
    quantization_track,
)
from servescope.planner.tracks_kernels import kernel_tuning_track
from servescope.planner.tracks_spec import speculative_track

TRACKS: dict[str, Callable[[Context], Proposal]] = {
    "speculative_decoding": speculative_track,
    "expert_parallel": expert_parallel_track,
    "custom_allreduce": custom_allreduce_track,
    "nccl_tuning": nccl_tuning_track,
    "collective_fusion": collective_fusion_track,
    "cuda_graphs": cuda_graphs_track,
    "async_scheduling": async_scheduling_track,
    "split_k_attention": split_k_attention_track,
    "kernel_tuning": kernel_tuning_track,
    "quantization": quantization_track,
    "pd_disaggregation": pd_disaggregation_track,
    "parallelism_change": parallelism_change_track,
}
TRACK_KINDS = tuple(TRACKS)


def parse_forbid(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """Comma-separated or listed track kinds; unknown names raise PlanError listing the valid ones."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    names = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
    unknown = [n for n in names if n not in TRACK_KINDS]
    if unknown:
        raise PlanError(f"unknown track {', '.join(unknown)}; valid: {', '.join(TRACK_KINDS)}")
    return names
