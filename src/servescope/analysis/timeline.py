"""The kernels of one representative step per step kind, for a timeline picture (kernels per stream).

Does: pick, per kind, the step whose GPU busy time is the median of that kind's steps (the lower median), and
keep its GPU events as columns: stream, start (µs after the step's first GPU event), duration, class,
collective, and the full kernel name. At most `max_kernels` events are kept (the earliest); `left_out` counts the
rest, so a picture can say it is partial.
Does not: compute any share or statistic (breakdown.py does), shorten names, or draw anything (servescope.report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

MAX_KERNELS = 3000  # a decode step of a large MoE model runs ~1-3k kernels; beyond, the picture is unreadable


@dataclass(frozen=True)
class StepTimeline:
    """GPU events of one step, one entry per event in each column, ordered by start."""

    kind: str
    step: int
    label: str
    steps_of_kind: int
    stream: tuple[int, ...]
    start_us: tuple[float, ...]
    dur_us: tuple[float, ...]
    kernel_class: tuple[str, ...]
    collective: tuple[str | None, ...]
    name: tuple[str, ...]
    left_out: int = 0  # events beyond max_kernels, not kept


def representative(steps: Sequence[tuple[int, str, float]]) -> dict[str, tuple[int, int]]:
    """Per kind, (step index, number of steps of the kind) of the median-busy step; `steps` holds
    (index, kind, gpu_busy_us)."""
    by_kind: dict[str, list[tuple[float, int]]] = {}
    for index, kind, busy_us in steps:
        by_kind.setdefault(kind, []).append((busy_us, index))
    out = {}
    for kind, rows in by_kind.items():
        rows.sort()
        out[kind] = (rows[(len(rows) - 1) // 2][1], len(rows))
    return out


def step_timelines(gpu: pl.DataFrame, steps: Sequence[tuple[int, str, float]], labels: dict[int, str],
                   max_kernels: int = MAX_KERNELS) -> tuple[StepTimeline, ...]:
    """One StepTimeline per kind. `gpu`: GPU events with `step`, `ts_us`, `dur_us`, `stream`, `kernel_class`,
    `collective`, `name` columns; `steps`: (index, kind, gpu_busy_us) of every step."""
    picks = representative(steps)
    if not picks:
        return ()
    wanted = [i for i, _ in picks.values()]
    rows = (gpu.filter(pl.col("step").is_in(wanted))
            .select("step", "ts_us", "dur_us", "stream", "kernel_class", "collective", "name")
            .sort("step", "ts_us"))
    out = []
    for kind, (index, n) in sorted(picks.items()):
        r = rows.filter(pl.col("step") == index)
        kept = r.head(max_kernels)
        t0 = float(r["ts_us"].to_numpy().min()) if r.height else 0.0
        out.append(StepTimeline(
            kind=kind, step=index, label=labels.get(index, ""), steps_of_kind=n,
            stream=tuple(int(s) if s is not None else -1 for s in kept["stream"].to_list()),
            start_us=tuple((kept["ts_us"] - t0).to_list()), dur_us=tuple(kept["dur_us"].to_list()),
            kernel_class=tuple(kept["kernel_class"].fill_null("other").to_list()),
            collective=tuple(kept["collective"].to_list()), name=tuple(kept["name"].to_list()),
            left_out=r.height - kept.height,
        ))
    return tuple(out)
