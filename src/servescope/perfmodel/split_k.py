"""Split-K (flash-decoding KV splits) priced from a kernel's own grid and per-CTA work: what S splits buy.

Does: given one kernel's launch (CTAs, the GPU's SMs, CTAs resident per SM), its measured time per call and the work
of each CTA (the token segments its loop walks — the same for every CTA, or each CTA's own when the work is uneven —,
the tile width, the bytes it streams whatever its share), predict its time per call at S splits and the best S.

Model (SI units: seconds, bytes, bytes/s; `bw` = the device's memory bandwidth — the callers give the datasheet's —,
`bw_sm` = bw / SMs, `slots` = SMs · resident CTAs per SM):
  κ          = one graph-replayed kernel's fixed time (launch gap + the ramp and drain of a small kernel), measured
               (specs/data/engine_overheads.toml [vllm.graph] per_kernel_us): inside the measured call t₁, and paid
               again by the split kernel and by its combine — it is not work a split spreads
  tiles_c(S) = Σ_segments ⌈⌈n/S⌉ / block⌉        the straggler split of CTA c: each segment is split on its own and
                                                 walked a whole tile at a time (≥ 1 tile)
             = Σ_segments ⌈min(⌈N/S⌉, n) / block⌉   `clamp`: the split kernel cuts the whole range N (the top-k
                                                 width) into S chunks and walks each only up to the CTA's valid
                                                 tokens n; the measured unsplit call walked all of N (vLLM #54929)
  work_c(S)  = Σ over the S splits of CTA c of their tiles (a split past the valid tokens walks none)
  fixed      = fixed_bytes / bw_sm               streaming in the query, out the (partial) state: every CTA, every split
  job_c(S)   = fixed + tiles_c(S) · t_tile       the straggler split of CTA c
  span(S)    = waves(S) · job(S)                  uniform work: SM slots fill in waves, waves(S) = ⌈CTAs·S / slots⌉
             = max(max_c job_c(S), Σ_c (S·fixed + work_c(S)·t_tile) / slots)
                                                 uneven work: no schedule beats the longest job (the straggler) or
                                                 the load per slot (list-scheduling bounds; greedy is within one job)
  t_tile     from t₁ − κ = span(1)                the one unknown, solved from the measured call
  reduce(S)  = κ + ⌈CTAs·slices / SMs⌉ · (S · partial_bytes / slices) / bw_sm       (S > 1 only)
                                                 a separate combine: one more graph-replayed kernel, each of its CTAs
                                                 (`slices` per output tile) streaming S partials
  floor      = Σ_c (fixed_bytes + Σ n · token_bytes) / bw           the device's bandwidth bounds every S
  t(S)       = κ + max(span(S), floor) + reduce(S);   t(1) = t₁ (measured)
Assumptions: a decode CTA walking a gather → dequant → online-softmax loop is bound by its own serial chain, so its
tile time is what the measured call says and co-resident CTAs keep it until the bandwidth floor; the split kernel
walks the same tiles as the unsplit one; with uneven work the measured call is the straggler's or the load's,
whichever binds (t_tile is the smaller of the two solutions).
Consequences: the gain is bounded by the straggler (a split never walks less than a tile per segment), by the fixed
streaming and by κ; it falls below 1 where the grid already fills the SMs (more waves, or more load per slot, for
the same tiles), where a CTA's work is short (the combine dominates) or where the work is uneven and the long CTAs
are already spread (splitting the short ones adds load, the straggler was not what bound the call): `best` then
keeps S = 1.
`sparse_decode_model` builds the inputs of one of the engines' sparse-attention decode kernels (specs.decode_kernels)
from its launch: the query and state of a CTA are its real heads (masked loads move only those); `lengths` gives
each sequence's valid top-k length where the kernel clamps its loop to it (uneven work).
Does not: read a trace (analysis.launch gives the geometry) or detect a kernel (analysis.sparse_decode does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servescope.errors import ServescopeError
from servescope.perfmodel.efficiency import measured_kernel_overhead_s
from servescope.specs.decode_kernels import DecodeKernel

# The splits a what-if tries: powers of two up to this many (vLLM's split-K decode paths go to 16–32 splits)
MAX_SPLITS = 64


@dataclass(frozen=True)
class SplitKernel:
    """One kernel's launch and per-CTA work (module docstring for the model). `call_s`: measured seconds per call
    at S = 1; `segments`: tokens per CTA of each segment its loop walks (e.g. (top-k,) or (SWA window, top-k));
    `block`: tokens per tile; `token_bytes`: bytes one token reads (KV row + index); `fixed_bytes`: bytes a CTA
    streams whatever its share (query in, state out); `partial_bytes`: one split's partial (fp32 m, l, acc) the
    combine reads; `bw_bytes_per_s`: the device's memory bandwidth; `slices`: combine CTAs per output tile;
    `cta_segments`: each CTA's own segments where the work is uneven (one entry per CTA; None: every CTA walks
    `segments`); `clamp`: the split kernel cuts the whole range `segments` into S chunks and walks each only up to
    the CTA's valid tokens (`cta_segments`), while the measured unsplit call walked the whole range."""

    ctas: int
    sms: int
    call_s: float
    segments: tuple[int, ...]
    block: int
    token_bytes: float
    fixed_bytes: float
    partial_bytes: float
    bw_bytes_per_s: float
    resident_per_sm: int = 1
    slices: int = 1
    kernel_s: float | None = None  # one graph-replayed kernel's fixed time; None: measured_kernel_overhead_s()
    cta_segments: tuple[tuple[int, ...], ...] | None = None
    clamp: bool = False

    def __post_init__(self) -> None:
        counts = (self.ctas, self.sms, self.block, self.resident_per_sm, self.slices)
        if min(counts) < 1 or not self.segments or min(self.segments) < 0 or sum(self.segments) < 1:
            raise ServescopeError(f"split-K: CTAs, SMs, block, resident CTAs and slices must be ≥ 1 and the segments "
                                  f"hold tokens (got {counts}, segments {self.segments})")
        if self.call_s <= 0 or self.bw_bytes_per_s <= 0 or min(self.token_bytes, self.fixed_bytes,
                                                                self.partial_bytes) < 0:
            raise ServescopeError("split-K: the call time and bandwidth must be > 0, the byte counts ≥ 0")
        if self.cta_segments is not None and (
                len(self.cta_segments) != self.ctas or any(not s or min(s) < 0 for s in self.cta_segments)):
            raise ServescopeError(f"split-K: cta_segments needs one non-empty, non-negative entry per CTA "
                                  f"({self.ctas} CTAs, got {len(self.cta_segments)})")

    @property
    def launch_s(self) -> float:
        """κ: one graph-replayed kernel's fixed time (launch gap + a small kernel's ramp and drain): measured on
        vLLM's FULL-graph decode trace (specs/data/engine_overheads.toml [vllm.graph] per_kernel_us, 1.99 µs) unless
        given."""
        return self.kernel_s if self.kernel_s is not None else measured_kernel_overhead_s()

    @property
    def uneven(self) -> bool:
        """The CTAs walk different work (cta_segments given and not all alike)."""
        return self.cta_segments is not None and len(set(self.cta_segments)) > 1

    def _work(self) -> tuple[tuple[int, ...], ...]:
        return self.cta_segments if self.cta_segments is not None else (self.segments,)

    @property
    def slots(self) -> int:
        return self.sms * self.resident_per_sm

    def waves(self, splits: int = 1) -> int:
        """⌈CTAs·S / (SMs · resident per SM)⌉."""
        return math.ceil(self.ctas * splits / self.slots)

    def split_tiles(self, segments: tuple[int, ...], splits: int) -> list[int]:
        """Tiles each of the S splits of one CTA walks (module docstring: its own tokens cut in ⌈n/S⌉ chunks, or —
        `clamp` — the kernel's whole range cut in ⌈N/S⌉ chunks, each walked up to the CTA's valid tokens)."""
        out = [0] * splits
        for i, n in enumerate(segments):
            whole = self.segments[i] if self.clamp and i < len(self.segments) else n
            chunk = math.ceil(max(whole, 1) / splits)
            for j in range(splits):
                out[j] += math.ceil(max(0, min(chunk, n - j * chunk)) / self.block)
        return out

    def tiles(self, splits: int = 1) -> int:
        """Tiles the straggler split walks (the longest CTA's; Σ ⌈⌈n/S⌉ / block⌉ over its segments unclamped)."""
        if splits == 1 and self.clamp:
            return sum(math.ceil(n / self.block) for n in self.segments)
        return max(max(self.split_tiles(s, splits)) for s in self._work())

    def _unsplit_uneven(self) -> bool:
        """The measured (unsplit) call walked uneven work (a clamping split kernel's unsplit one walks the range)."""
        return self.uneven and not self.clamp

    @property
    def sm_bw(self) -> float:
        """One SM's share of the achievable bandwidth (bytes/s)."""
        return self.bw_bytes_per_s / self.sms

    @property
    def fixed_s(self) -> float:
        """A CTA's streaming of the query and its state: fixed_bytes at its SM's share of the bandwidth."""
        return self.fixed_bytes / self.sm_bw

    def _span(self, splits: int, tile_s: float) -> float:
        if not self.uneven:
            return self.waves(splits) * (self.fixed_s + self.tiles(splits) * tile_s)
        straggler = self.fixed_s + self.tiles(splits) * tile_s
        load = sum(splits * self.fixed_s + sum(self.split_tiles(s, splits)) * tile_s
                   for s in self._work()) / self.slots
        return max(straggler, load)

    @property
    def tile_s(self) -> float:
        """One tile of the loop, from the measured call less κ (0 when the call is already at the fixed floor)."""
        busy = self.call_s - self.launch_s
        if not self._unsplit_uneven():
            return max(0.0, busy / self.waves(1) - self.fixed_s) / self.tiles(1)
        straggler = (busy - self.fixed_s) / self.tiles(1)
        load = (busy * self.slots - self.ctas * self.fixed_s) / sum(self.split_tiles(s, 1)[0] for s in self._work())
        return max(0.0, min(straggler, load))

    def span_s(self, splits: int) -> float:
        """The split kernel's CTAs, κ aside: waves of the straggler, or the straggler / load bound (uneven)."""
        return self._span(splits, self.tile_s)

    def reduce_s(self, splits: int) -> float:
        """The combine of S partials (0 at S = 1): κ plus its CTAs streaming S partials, in waves."""
        if splits <= 1:
            return 0.0
        waves = math.ceil(self.ctas * self.slices / self.sms)
        return self.launch_s + waves * splits * self.partial_bytes / self.slices / self.sm_bw

    def floor_s(self) -> float:
        """The device's bandwidth floor for every byte the kernel moves."""
        work = self.cta_segments if self.cta_segments is not None else (self.segments,) * self.ctas
        return sum(self.fixed_bytes + sum(s) * self.token_bytes for s in work) / self.bw_bytes_per_s

    def time_s(self, splits: int) -> float:
        """Predicted seconds per call at `splits` (≥ 1); S = 1 is the measured call."""
        if splits < 1:
            raise ServescopeError(f"split-K: splits must be ≥ 1 (got {splits})")
        if splits == 1:
            return self.call_s
        return self.launch_s + max(self.span_s(splits), self.floor_s()) + self.reduce_s(splits)

    def candidates(self) -> list[int]:
        """1, 2, 4, … up to MAX_SPLITS and no more than the longest segment's tiles (past that a split is empty; a
        clamping kernel cuts its whole range whatever the valid lengths)."""
        longest = max(self.segments) if self.clamp else max(n for s in self._work() for n in s)
        top = min(MAX_SPLITS, math.ceil(longest / self.block))
        return [2 ** i for i in range(int(math.log2(max(top, 1))) + 1)]

    def best(self) -> SplitChoice:
        """The S with the least predicted time (S = 1 when no split pays), with the time of every S tried."""
        times = {s: self.time_s(s) for s in self.candidates()}
        s = min(times, key=lambda k: (times[k], k))
        return SplitChoice(s, times[s], self.call_s, self.reduce_s(s), self.waves(s), times)


@dataclass(frozen=True)
class SplitChoice:
    """The best split: S, predicted seconds per call, the measured call, the reduce's part, waves, every S tried."""

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

    def gain_at(self, splits: int) -> float:
        """Old / new at a forced S (below 1 where splitting loses)."""
        return self.call_s / self.tried[splits]


def sparse_decode_model(k: DecodeKernel, ctas: int, sms: int, call_s: float, heads: int, bw_bytes_per_s: float,
                        segments: tuple[int, ...] | None = None,
                        lengths: tuple[int, ...] | None = None) -> SplitKernel:
    """The split-K inputs of `k` launched as `ctas` CTAs of `heads` real heads each (≤ its head tile) on `sms` SMs
    (`segments`: the model's top-k and window, else the table's). `lengths`: each CTA's valid top-k length (the
    last segment capped at it; one entry per CTA) — uneven work; a kernel whose split path cuts the whole top-k range
    and clamps each split to the valid length (`clamped_splits`) prices its splits so."""
    h = max(1, min(heads, k.head_block))
    partial = h * (k.state_dim * 4 + 8)            # fp32 acc + m, l per head
    fixed = h * k.q_dim * 2 + partial              # bf16 query in, fp32 state out
    seg = segments or k.segments
    per_cta = (tuple(seg[:-1] + (min(seg[-1], max(n, 0)),) for n in lengths) if lengths is not None else None)
    return SplitKernel(ctas, sms, call_s, seg, k.block, k.token_bytes, fixed, partial, bw_bytes_per_s,
                       slices=k.slices, cta_segments=per_cta, clamp=k.clamped_splits)
