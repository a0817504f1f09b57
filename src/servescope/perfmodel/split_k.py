"""Split-K (flash-decoding KV splits) priced from a kernel's own grid and per-CTA work: what S splits buy.

Does: given one kernel's launch (CTAs, the GPU's SMs, CTAs resident per SM), its measured time per call and the
work of one CTA (tiles along the split axis, bytes per tile, bytes every CTA moves whatever its share: the query
it loads and the partial state it stores), predict its time per call at S splits and the best S.

Model (SI units; seconds, bytes, bytes/s):
  waves(S)   = ⌈CTAs·S / (SMs · resident)⌉                      SM slots fill in waves; a partial wave costs a whole one
  t_cta(S)   = (fixed_bytes + ⌈tiles/S⌉ · tile_bytes) / thr     the straggler CTA walks the most tiles (a split never
                                                                gets less than one tile; `fixed_bytes` is not split)
  thr        = (fixed_bytes + tiles · tile_bytes) / (t₁ / waves(1))   per-CTA throughput, from the measured call t₁
  reduce(S)  = kernel_s + partial_bytes / thr   (S > 1 only)   a separate combine kernel (one graph-replayed launch)
                                                                reading one partial per CTA at the same per-CTA
                                                                throughput (a combine as parallel as the split grid)
  floor      = CTAs · (fixed_bytes + tiles · tile_bytes) / bw  (bw known) the device's bandwidth bounds every S
  t(S)       = max(waves(S) · t_cta(S), floor) + reduce(S)
Assumptions: a CTA's speed is set by its own serial chain (a decode CTA walking a gather/dequant/online-softmax loop is
latency-bound, far below its SM's share of bandwidth), so co-resident CTAs run at the same per-CTA throughput until
the device's bandwidth floor; the split changes only how many tiles the straggler walks. Per-CTA work is uniform
across the grid (the measured straggler stands for all); where it is not, t₁ already is the straggler's.
Consequences: the gain is bounded by the straggler (⌈tiles/S⌉ ≥ 1) and by the fixed bytes, and it falls below 1
where the grid already fills the SMs (more waves for the same work) or per-CTA work is short (the reduce
dominates): `best` then keeps S = 1.
Does not: read a trace (analysis.launch gives the geometry) or know a kernel by name (analysis.sparse_decode does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servescope.errors import ServescopeError

# The splits a what-if tries: powers of two up to this many (vLLM's split-K decode paths go to 16–64 splits)
MAX_SPLITS = 64
# Per-kernel cost of one more launch in a CUDA-graph replay (launch gap + a small kernel's tail): 1.99 µs measured
# on vLLM's FULL-graph decode trace (specs/data/engine_overheads.toml [vllm.graph] per_kernel_us, the perfmodel's
# kernel_overhead_s); repeated here because analysis reads no specs.
REDUCE_KERNEL_S = 1.99e-6


@dataclass(frozen=True)
class SplitKernel:
    """One kernel's launch and per-CTA work (module docstring for the model). `call_s`: measured time per call at
    S = 1; `tiles`: tiles along the split axis per CTA (e.g. ⌈top-k / BLOCK_N⌉); `tile_bytes`: bytes one tile reads;
    `fixed_bytes`: bytes one CTA moves whatever its share (query in, partial state out); `partial_bytes`: one split's
    partial output (fp32 m, l, acc) the combine reads; `bw_bytes_per_s`: achievable device bandwidth (None: no
    floor)."""

    ctas: int
    sms: int
    call_s: float
    tiles: int
    tile_bytes: float
    fixed_bytes: float
    partial_bytes: float
    resident_per_sm: int = 1
    bw_bytes_per_s: float | None = None
    kernel_s: float = REDUCE_KERNEL_S

    def __post_init__(self) -> None:
        if self.ctas < 1 or self.sms < 1 or self.tiles < 1 or self.resident_per_sm < 1:
            raise ServescopeError(f"split-K: CTAs, SMs, tiles and resident CTAs must be ≥ 1 (got {self.ctas}, "
                                  f"{self.sms}, {self.tiles}, {self.resident_per_sm})")
        if self.call_s <= 0 or self.tile_bytes <= 0 or self.fixed_bytes < 0 or self.partial_bytes < 0:
            raise ServescopeError("split-K: the call time and tile bytes must be > 0, the other bytes ≥ 0")

    def waves(self, splits: int = 1) -> int:
        """⌈CTAs·S / (SMs · resident per SM)⌉."""
        return math.ceil(self.ctas * splits / (self.sms * self.resident_per_sm))

    @property
    def cta_bytes(self) -> float:
        """Bytes one CTA moves at S = 1 (fixed + every tile)."""
        return self.fixed_bytes + self.tiles * self.tile_bytes

    @property
    def throughput(self) -> float:
        """Per-CTA throughput (bytes/s) the measured call implies: one CTA's bytes over one wave's time."""
        return self.cta_bytes / (self.call_s / self.waves(1))

    def cta_s(self, splits: int) -> float:
        """The straggler CTA's time at S splits: fixed bytes plus ⌈tiles/S⌉ tiles at the per-CTA throughput."""
        return (self.fixed_bytes + math.ceil(self.tiles / splits) * self.tile_bytes) / self.throughput

    def reduce_s(self, splits: int) -> float:
        """The combine of S partials: one more graph-replayed launch plus one partial read per CTA; 0 at S = 1."""
        return 0.0 if splits <= 1 else self.kernel_s + self.partial_bytes / self.throughput

    def floor_s(self) -> float:
        """The device's bandwidth floor for the kernel's bytes (0 without a bandwidth)."""
        return self.ctas * self.cta_bytes / self.bw_bytes_per_s if self.bw_bytes_per_s else 0.0

    def time_s(self, splits: int) -> float:
        """Predicted seconds per call at `splits` (≥ 1); S = 1 returns the measured call."""
        if splits < 1:
            raise ServescopeError(f"split-K: splits must be ≥ 1 (got {splits})")
        if splits == 1:
            return self.call_s
        return max(self.waves(splits) * self.cta_s(splits), self.floor_s()) + self.reduce_s(splits)

    def candidates(self) -> list[int]:
        """1, 2, 4, … up to MAX_SPLITS and no more than the tiles (a split below one tile is empty)."""
        out, s = [], 1
        while s <= min(MAX_SPLITS, self.tiles):
            out.append(s)
            s *= 2
        return out

    def best(self) -> SplitChoice:
        """The S with the least predicted time (S = 1 when no split pays), with the time of every S tried."""
        times = {s: self.time_s(s) for s in self.candidates()}
        s = min(times, key=lambda k: (times[k], k))
        return SplitChoice(s, times[s], self.call_s, self.reduce_s(s), self.waves(s), times)


@dataclass(frozen=True)
class SplitChoice:
    """The best split: S, predicted seconds per call, the measured call, the reduce's share, waves, all S tried."""

    splits: int
    time_s: float
    call_s: float
    reduce_s: float
    waves: int
    tried: dict[int, float]

    @property
    def ratio(self) -> float:
        """Predicted new / old time per call (< 1: split-K pays)."""
        return self.time_s / self.call_s

    @property
    def gain(self) -> float:
        """Old / new time per call."""
        return self.call_s / self.time_s

    def loss_at(self, splits: int) -> float:
        """Old / new at a forced S: below 1 where splitting loses."""
        return self.call_s / self.tried[splits]
