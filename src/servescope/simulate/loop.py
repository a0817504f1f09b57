"""The engine loop: a discrete-event simulation at step granularity of one engine instance under a client.

Time advances one engine step at a time: at each step start the client sends what it may (scheduled time reached
and, with a cap, a free in-flight slot: a finished request frees its slot when the client holds its last token,
the end of the step that finished it plus the delivery), requests become schedulable after the front end (the
per-request set-up of stepcost.py less the delivery; stepcost.split_setup), the scheduler picks the step's
composition (scheduler.py), the step takes the model's time for that composition (stepcost.py), and tokens leave
the engine at the step's end (the client holds each `delivery_s` later: boundaries.py). With nothing to run the
clock jumps to the next send.
Recorded per request: sent, first scheduled, first token and finish as the engine emits them, preemptions,
prefill tokens and prefix-cache hits (prefix.py); the pooled inter-token gaps; per step: time, running, queued,
KV blocks in use, tokens, and the step's GPU time, rank-arrival wait and sequences (stepcost.last_gpu_s,
last_wait_s; the host time and what of it is exposed computed from them once, after the run) that boundaries.py
splits each request's TPOT into.
What it does not: summarise (metrics.py) or pick defaults (engine.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from servescope.errors import ScenarioError
from servescope.perfmodel.memory import (
    engine_kv_bytes_per_gpu,
    kv_bytes_per_seq,
    usable_bytes_per_gpu,
)
from servescope.perfmodel.scenario import Scenario
from servescope.simulate.budget import step_tokens
from servescope.simulate.engine import EngineConfig
from servescope.simulate.offload import Offload
from servescope.simulate.prefix import PrefixCache
from servescope.simulate.scheduler import SchedState
from servescope.simulate.stepcost import StepCost, split_setup
from servescope.simulate.workload import Workload

Progress = Callable[[int, int], None]  # (requests finished, total)
MAX_RUN_STEPS = 512  # longest run of decode steps evaluated at once
RATIO_RUN_STEPS = 8  # ... while requests wait under a decaying KV reservation (SGLang)
RUN_PREFIX_STEPS = 4  # least first prefix of a decode run priced before the next client event is checked (≥ 2)


@dataclass(frozen=True)
class RawRun:
    """Everything the loop recorded; times in seconds from the first send."""

    sent_s: np.ndarray
    first_sched_s: np.ndarray
    considered_s: np.ndarray  # first step start at which the request was schedulable
    first_token_s: np.ndarray  # as the engine emits it (the client holds it delivery_s later: metrics.per_request)
    finish_s: np.ndarray  # the engine's last token
    isl: np.ndarray
    osl: np.ndarray
    preemptions: np.ndarray
    itl_s: np.ndarray  # pooled gaps between successive tokens of each request
    step_t_s: np.ndarray  # end time of each step
    step_dur_s: np.ndarray
    step_running: np.ndarray
    step_waiting: np.ndarray
    step_tokens: np.ndarray
    step_kv_blocks: np.ndarray
    total_blocks: int
    block_size_tokens: int
    setup_s: float = 0.0  # front end per request (stepcost.setup_s less delivery_s): sent → schedulable
    prefill_tokens: np.ndarray | None = None  # per request: tokens run through prefill (recompute included)
    cached_tokens: np.ndarray | None = None  # per request: prompt tokens found in the prefix cache (None: off)
    swap_blocks: int = 0  # KV blocks copied between GPU and host (offload.py), out and in
    swap_s: float = 0.0  # seconds of steps those copies took
    delivery_s: float = 0.0  # a token leaving the engine → the client holding it (stepcost.split_setup)
    # per step (boundaries.py): GPU work, rank-arrival wait (stepcost.last_gpu_s, last_wait_s), host time, exposed
    step_gpu_s: np.ndarray | None = None
    step_wait_s: np.ndarray | None = None
    step_cpu_s: np.ndarray | None = None
    step_host_s: np.ndarray | None = None
    sources: dict[str, str] | None = None  # where the per-request constants and the rank wait come from


def kv_blocks(sc: Scenario, cfg: EngineConfig) -> int:
    """KV blocks of the instance: dp · ⌊KV bytes per GPU / bytes per block⌋, the KV bytes as the backend sizes its
    pool (memory.usable_bytes_per_gpu: the engine version's memory share, as the closed-form model; an explicit
    EngineConfig.kv_mem_fraction overrides it), bytes per token taken from
    the scenario's mean sequence (isl + osl; exact for full attention, an average for windows and recurrent state)."""
    ref = float(sc.isl + sc.osl)
    per_block = kv_bytes_per_seq(sc, ref) / ref * cfg.block_size_tokens
    free = (usable_bytes_per_gpu(sc) if cfg.kv_mem_fraction is None
            else engine_kv_bytes_per_gpu(sc, cfg.kv_mem_fraction, cfg.kv_mem_of))
    if per_block <= 0:
        return 10**9
    return int(sc.dp * max(free, 0.0) // per_block)


def check_fits(sc: Scenario, cfg: EngineConfig, wl: Workload, total_blocks: int) -> None:
    """One-line ScenarioError for a request longer than the context limit, or with no KV room even alone."""
    longest = int((wl.isl + wl.osl).max())
    i = int(np.argmax(wl.isl + wl.osl))
    if cfg.max_model_len is not None and longest > cfg.max_model_len:
        raise ScenarioError(f"a request of {wl.isl[i]} + {wl.osl[i]} tokens exceeds the context limit "
                            f"max_model_len={cfg.max_model_len}")
    cap_tokens = total_blocks * cfg.block_size_tokens
    if longest > cap_tokens:
        raise ScenarioError(f"no KV room for one request: {longest} tokens needed, the KV cache holds "
                            f"{cap_tokens} tokens ({sc.model.name} on {sc.n_gpus}x {sc.gpu.name})")
    if not cfg.chunked_prefill and int(wl.isl.max()) > cfg.max_num_batched_tokens * sc.dp:
        raise ScenarioError(f"a prompt of {int(wl.isl.max())} tokens exceeds max_num_batched_tokens="
                            f"{cfg.max_num_batched_tokens} and chunked prefill is off for {cfg.backend}")


class _Client:
    """Sends requests at their scheduled times, at most `cap` in flight; each becomes ready setup_s later."""

    def __init__(self, wl: Workload, setup_s: float):
        self.sched: list[float] = wl.sched_s.astype(float).tolist()  # Python floats: scalar reads per step
        self.setup_s, self.next = setup_s, 0
        cap = wl.n if wl.max_in_flight is None else min(wl.max_in_flight, wl.n)
        self.slots = [0.0] * cap  # times at which in-flight slots became free (a heap)
        self.ready: list[tuple[float, int]] = []  # (ready time, id) heap
        self.sent = np.full(wl.n, np.nan)

    def send_until(self, now: float) -> None:
        while self.next < len(self.sched) and self.slots and max(self.sched[self.next], self.slots[0]) <= now:
            t = max(self.sched[self.next], heapq.heappop(self.slots))
            self.sent[self.next] = t
            heapq.heappush(self.ready, (t + self.setup_s, self.next))
            self.next += 1

    def pop_ready(self, now: float) -> list[int]:
        out = []
        while self.ready and self.ready[0][0] <= now:
            out.append(heapq.heappop(self.ready)[1])
        return out

    def next_event_s(self) -> float:
        t = self.ready[0][0] if self.ready else np.inf
        if self.next < len(self.sched) and self.slots:
            t = min(t, max(self.sched[self.next], self.slots[0]) + self.setup_s)
        return float(t)


def simulate_raw(sc: Scenario, cfg: EngineConfig, wl: Workload, progress: Progress | None = None,
                 total_blocks: int | None = None, offload: Offload | None = None, itl: bool = True) -> RawRun:
    """Run the workload to completion on one engine instance (sc: perfmodel Scenario), with a host KV tier
    when `offload` (offload.py). `itl` False: the pooled inter-token gaps are not kept (RawRun.itl_s empty; a
    closed loop of 4,096 requests × 6,720 tokens pools 27 M of them, 220 MB, for metrics a grid sweep does not
    read); nothing else changes."""
    blocks = kv_blocks(sc, cfg) if total_blocks is None else int(total_blocks)
    check_fits(sc, cfg, wl, blocks)
    return _Loop(sc, cfg, wl, blocks, progress, offload, itl).run()


class _Loop:
    """The simulation state outside the scheduler: clock, client, per-request times, records."""

    def __init__(self, sc: Scenario, cfg: EngineConfig, wl: Workload, blocks: int, progress: Progress | None,
                 offload: Offload | None = None, itl: bool = True):
        self.wl, self.progress, self.cfg, self.keep_itl = wl, progress, cfg, itl
        self.s_per_block = offload.s_per_block if offload is not None else 0.0
        self.swap_s = 0.0
        prefix = PrefixCache(wl.isl, cfg.block_size_tokens, wl.prefix_hit_rate, wl.shared_prefix_tokens)
        self.st = SchedState(wl.isl, wl.osl, blocks, cfg, max(1, int(sc.dp)), prefix, offload)
        max_tokens = max(self.st.budget, self.st.max_seqs) + 1
        longest = int((wl.isl + wl.osl).max())
        reach = step_tokens(self.st.budget, self.st.max_seqs, wl.n, longest) + 1  # no step carries more tokens
        self.cost = StepCost(sc, cfg, max_tokens, longest + 1, table_tokens=reach)
        if cfg.decode_level != 1.0:  # a measured decode level: decode tables and the step's CPU time × it
            self.cost.scale_decode(cfg.decode_level)
        self.split = split_setup(sc, cfg, self.cost.setup_s)
        self.cl = _Client(wl, self.split.front_s)
        n = wl.n
        self.first_sched, self.considered = np.full(n, np.nan), np.full(n, np.nan)
        self.first_tok, self.last_tok, self.finish = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        self.itl: list[np.ndarray] = []
        self.rec: list[tuple[float, ...]] = []  # end, dt, running, waiting, tokens, blocks, gpu, wait, sequences
        self.now, self.finished = 0.0, 0

    def run(self) -> RawRun:
        st, cl = self.st, self.cl
        while self.finished < self.wl.n:
            cl.send_until(self.now)
            new = cl.pop_ready(self.now)
            if new:
                self.considered[new] = self.now
                st.waiting.extend(new)
            if not len(st.run) and not st.waiting:
                self.now = max(self.now, cl.next_event_s())
                continue
            ids, toks, admitted = st.schedule()
            if admitted:
                a = np.asarray(admitted)
                self.first_sched[a[np.isnan(self.first_sched[a])]] = self.now
            if not len(ids):  # nothing fits (cannot happen with capacity checked): wait for the next arrival
                self.now = max(self.now, cl.next_event_s())
                continue
            swap_s = st.take_swaps() * self.s_per_block  # copies to and from the host stall this step
            self.swap_s += swap_s
            pure = not admitted and len(ids) == len(st.run) and bool((toks == 1).all())
            if pure and bool((st.generated[ids] >= 1).all()):
                self._decode_run(ids, swap_s)
            else:
                self._step(ids, toks, swap_s)
        return self._raw()

    def _step(self, ids: np.ndarray, toks: np.ndarray, swap_s: float = 0.0) -> None:
        st = self.st
        ctx = st.computed[ids]
        dec = toks == 1
        dt = self.cost.step_s(ctx[dec] + 1, toks[~dec], ctx[~dec]) + swap_s
        self.now += dt
        emit, done = st.advance(ids, toks)
        if self.keep_itl:
            seen = emit[~np.isnan(self.last_tok[emit])]
            if len(seen):
                self.itl.append(self.now - self.last_tok[seen])
        self.first_tok[emit[np.isnan(self.first_tok[emit])]] = self.now
        self.last_tok[emit] = self.now
        self.rec.append((self.now, dt, len(st.run), len(st.waiting), int(toks.sum()), st.used_blocks,
                         self.cost.last_gpu_s, self.cost.last_wait_s, len(ids)))
        self._finish(done)

    def _decode_run(self, ids: np.ndarray, swap_s: float = 0.0) -> None:
        """k identical-membership decode steps at once: up to the first finish, the KV limit, or the next
        client event (a request becoming schedulable), whichever comes first."""
        st = self.st
        k = int((st.out[ids] - st.generated[ids]).min())
        if st.ratio and st.waiting:  # the reserved share decays: a queued request may fit within a few steps
            k = min(k, RATIO_RUN_STEPS)
        k = st.decode_room(ids, min(k, MAX_RUN_STEPS))
        durs, ends = self._run_until_event(st.computed[ids].astype(float) + 1.0, k, swap_s)
        k = len(durs)
        used0 = st.used_blocks
        if self.keep_itl:
            self.itl.append(ends[0] - self.last_tok[ids])
            if k > 1:
                self.itl.append(np.repeat(durs[1:], len(ids)))
        self.now = float(ends[-1])
        self.last_tok[ids] = self.now
        done = st.advance_decode(ids, k)
        used1 = st.used_blocks + int(st.freed_last)  # before the finished requests released their blocks
        used = used0 + (used1 - used0) * np.arange(1, k + 1) / k  # blocks fill in between (linear)
        self._record(ends, durs, len(ids), used)
        self._finish(done)

    def _run_until_event(self, ctx: np.ndarray, k: int, swap_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(durations, end times) of the pure-decode steps from contexts ctx up to k of them, stopping before the
        first step that starts at or after the next client event (at least one). The steps are priced in growing
        prefixes (first the steps to the next event at the last step's duration, at least RUN_PREFIX_STEPS;
        then ×4): a run cut short by an arrival prices only about the steps it takes. A
        prefix of m ≥ 2 steps gives the same per-step values as the whole run (elementwise, the per-step sum over
        sequences in the same order), so the result does not depend on the prefix size."""
        nxt = self.cl.next_event_s()
        m = k
        if self.rec and nxt < np.inf:  # the steps to the next event at the last step's duration, and a margin
            m = min(k, max(RUN_PREFIX_STEPS, int((nxt - self.now) / max(self.rec[-1][1], 1e-9)) + 2))
        while True:
            durs = self.cost.decode_run_s(ctx, m)
            durs[0] += swap_s
            ends = self.now + np.cumsum(durs)
            starts = np.concatenate([[self.now], ends[:-1]])
            used = max(1, int(np.count_nonzero(starts < nxt)))
            if used < m or m == k:
                return durs[:used], ends[:used]
            m = min(k, 4 * m)

    def _finish(self, done: np.ndarray) -> None:
        if not len(done):
            return
        self.finish[done] = self.now
        self.finished += len(done)
        for _ in range(len(done)):  # the client's slot frees when it holds the last token
            heapq.heappush(self.cl.slots, self.now + self.split.delivery_s)
        if self.progress is not None:
            self.progress(self.finished, self.wl.n)

    def _record(self, ends: np.ndarray, durs: np.ndarray, tokens: int, used: np.ndarray) -> None:
        """The run's steps (tokens = its sequences, one token each), with their GPU time and rank wait."""
        run, wait, k = len(self.st.run), len(self.st.waiting), len(durs)
        w = self.cost.last_wait_s
        waits = w[:k].tolist() if isinstance(w, np.ndarray) else repeat(w, k)
        self.rec.extend((e, d, run, wait, tokens, u, g, rw, tokens) for e, d, u, g, rw in zip(
            ends.tolist(), durs.tolist(), used.tolist(), self.cost.last_gpu_s[:k].tolist(), waits, strict=True))

    def _raw(self) -> RawRun:
        r = np.asarray(self.rec, dtype=float).reshape(-1, 9)
        cpu, exposed = self.cost.host_parts(r[:, 6], r[:, 8])  # the same functions, per step, as priced
        st = self.st
        return RawRun(
            sent_s=self.cl.sent, first_sched_s=self.first_sched, considered_s=self.considered,
            first_token_s=self.first_tok, finish_s=self.finish, isl=self.wl.isl, osl=self.wl.osl,
            preemptions=st.preemptions.copy(), itl_s=np.concatenate(self.itl) if self.itl else np.zeros(0),
            step_t_s=r[:, 0], step_dur_s=r[:, 1], step_running=r[:, 2].astype(np.int64),
            step_waiting=r[:, 3].astype(np.int64), step_tokens=r[:, 4].astype(np.int64),
            step_kv_blocks=r[:, 5].astype(np.int64), total_blocks=st.total_blocks,
            block_size_tokens=self.cfg.block_size_tokens, setup_s=self.split.front_s,
            prefill_tokens=st.prefilled.copy(), cached_tokens=None if st.pc is None else st.pc.cached.copy(),
            swap_blocks=st.swap_total, swap_s=self.swap_s, delivery_s=self.split.delivery_s,
            step_gpu_s=r[:, 6] - r[:, 7], step_wait_s=r[:, 7], step_cpu_s=np.broadcast_to(cpu, len(r)),
            step_host_s=exposed,
            sources=self.split.sources,
        )
