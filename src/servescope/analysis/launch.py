"""Launch geometry per kernel: how many CTAs a kernel launches and how they sit on the GPU's SMs.

Does: from a loaded trace's kernel rows (Kineto `grid`/`block` args, kept by the reader as their products
`grid_blocks` and `block_threads`) and the GPU's SM count (the trace's `deviceProperties` numSms, or one given —
specs.hardware's `sm_count` for a GPU the trace does not describe), give per kernel name: calls, median µs, CTAs
(the grid's product; the median over calls), threads per CTA, CTAs per SM (= CTAs / SMs), waves
(⌈CTAs / (SMs · resident CTAs per SM)⌉) and the share of SMs busy in the last wave (CTAs / (waves · SMs · resident)).
"64 CTAs on 188 SMs" is 0.34 CTAs per SM, one wave, 34% of SMs busy.
Assumptions: one resident CTA per SM unless told (a decode attention CTA holding ~100 KB of shared memory leaves room
for one); a kernel whose grid varies between calls is described by its median call.
`SplitWhatIf` / `SplitPricer`: a split-K what-if of one launch as data, and the callable that prices one (the
model side's perfmodel.split_k, handed in through `Peaks.split_k` by advise: analysis reads no specs).
Does not: read registers, shared memory or achieved occupancy (the reader drops them), or price anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from servescope.trace.types import Trace


@dataclass(frozen=True)
class Launch:
    """One kernel's launch geometry (module docstring). `sms` None: the GPU's SM count is unknown, so are the
    per-SM numbers."""

    name: str
    calls: int
    median_us: float
    ctas: int
    block_threads: int | None
    sms: int | None
    resident_per_sm: int = 1

    @property
    def ctas_per_sm(self) -> float | None:
        return self.ctas / self.sms if self.sms else None

    @property
    def waves(self) -> int | None:
        return math.ceil(self.ctas / (self.sms * self.resident_per_sm)) if self.sms else None

    @property
    def busy_sm_share(self) -> float | None:
        """Share of the SM slots the CTAs occupy over the waves run (1.0 for whole waves)."""
        w = self.waves
        return self.ctas / (w * self.sms * self.resident_per_sm) if w and self.sms else None

    def describe(self) -> str:
        """'64 CTAs on 188 SMs: 34% of SMs busy' (or '64 CTAs' without an SM count)."""
        if not self.sms:
            return f"{self.ctas} CTAs"
        share = self.busy_sm_share or 0.0
        waves = "" if self.waves == 1 else f" over {self.waves} waves"
        return f"{self.ctas} CTAs on {self.sms} SMs{waves}: {share:.0%} of SMs busy"


def geometry(ctas: int, sms: int | None, resident_per_sm: int = 1, name: str = "", calls: int = 1,
             median_us: float = 0.0, block_threads: int | None = None) -> Launch:
    """A launch from numbers (the planner's model shapes, tests)."""
    return Launch(name, calls, median_us, int(ctas), block_threads, sms, max(int(resident_per_sm), 1))


def launches(trace: Trace, sms: int | None = None) -> list[Launch]:
    """Per kernel name of `trace` with a grid: its launch geometry, longest total time first. `sms`: the GPU's SM
    count when the trace does not carry one (else the trace's device wins)."""
    ev = trace.events.filter((pl.col("kind") == "kernel") & pl.col("grid_blocks").is_not_null()
                             & (pl.col("grid_blocks") > 0))
    if ev.is_empty():
        return []
    rows = (ev.group_by("name")
            .agg(pl.len().alias("calls"), pl.col("dur_us").median().alias("median_us"),
                 pl.col("dur_us").sum().alias("total_us"), pl.col("grid_blocks").median().alias("ctas"),
                 pl.col("block_threads").median().alias("threads"), pl.col("device").first().alias("device"))
            .sort(["total_us", "name"], descending=[True, False]))
    out = []
    for r in rows.iter_rows(named=True):
        info = trace.device_info(r["device"])
        n_sms = info.num_sms if info is not None and info.num_sms else sms
        threads = int(r["threads"]) if r["threads"] is not None else None
        out.append(Launch(r["name"], int(r["calls"]), float(r["median_us"]), int(round(r["ctas"])), threads, n_sms))
    return out


@dataclass(frozen=True)
class SplitWhatIf:
    """Split-K on one launch: the best S, predicted and measured seconds per call, the combine's part, the seconds
    at every S tried, which engine kernel it was priced as and the source of its shape."""

    label: str
    splits: int
    time_s: float
    call_s: float
    reduce_s: float
    tried: dict[int, float] = field(default_factory=dict)
    source: str = ""

    @property
    def gain(self) -> float:
        return self.call_s / self.time_s


# (kernel name, CTAs, SMs, measured seconds per call) → the what-if, or None for a kernel the pricer does not know
SplitPricer = Callable[[str, int, int, float], SplitWhatIf | None]

