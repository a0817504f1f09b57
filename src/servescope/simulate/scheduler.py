"""Continuous-batching scheduler of one engine instance: which requests run in the next step, with how many tokens.

Per request the state is: prompt tokens, output tokens wanted, generated so far, and KV tokens computed. The
tokens a request still has to compute before it can emit its next token are `pending = prompt + generated −
computed` (the whole prompt at first, 1 while decoding, prompt + generated again after a preemption: recompute).
A step runs n_i ≤ pending_i tokens of each scheduled request; when computed reaches prompt + generated the
request emits a token.

Policies (engine.py; the engine record, specs/data/engines/<engine>.toml scheduler):
  decode_first   running requests in admission order take their pending tokens from the step budget
                 (max_num_batched_tokens), then waiting requests are admitted FCFS into the remaining budget
                 (chunked when chunked_prefill, else only whole prompts that fit); no admission in a step that
                 preempted (vLLM V1)
  prefill_first  if a request is mid-prefill or one can be admitted, the step is prefill only (budget-limited);
                 otherwise every running request decodes one token (SGLang without mixed chunks)
KV: blocks of block_size_tokens. on_demand allocates as tokens are computed; when a step needs more than are
free the most recently admitted running request is preempted (blocks freed, back to the head of the queue,
recomputed later; with a host tier, offload.py, its blocks are copied out and back instead). reserve_full admits a request only when blocks for prompt + output are free. reserve_ratio
(SGLang) is on_demand with admission only when the free blocks also hold ratio × the remaining output of the
running requests and of the candidate; the ratio decays per step and resets on a preemption.
What it does not: time steps (stepcost.py) or generate arrivals (workload.py, loop.py).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from servescope.simulate.engine import EngineConfig
from servescope.simulate.offload import Offload
from servescope.simulate.prefix import PrefixCache

CLIP_NEW_TOKENS = 4096  # SGLang schedule_policy.py CLIP_MAX_NEW_TOKENS_ESTIMATION: output reserved per request


class SchedState:
    """Mutable state of every request (arrays indexed by request id) plus the running list and the queue."""

    def __init__(self, isl: np.ndarray, osl: np.ndarray, total_blocks: int, cfg: EngineConfig, dp: int,
                 prefix: PrefixCache | None = None, offload: Offload | None = None):
        n = len(isl)
        # KV offload (offload.py): a preempted request's blocks go to the host tier instead of being dropped
        self.host_free = offload.host_blocks if offload is not None else 0
        self.swapped = np.zeros(n, dtype=np.int64)  # blocks of each request held on the host
        self.swap_moved = 0  # blocks copied (out + in) since the loop last took them (take_swaps)
        self.swap_total = 0
        # prefix caching (prefix.py): hits on admission, shared blocks counted once; off = shared blocks referenced
        self.pc = prefix if prefix is not None and prefix.enabled else None
        self.off = self.pc.off if self.pc is not None else np.zeros(n, dtype=np.int64)
        self.no_off = self.pc is None  # no prefix cache: off stays 0 and the KV sums skip it (the same integers)
        self.prefilled = np.zeros(n, dtype=np.int64)  # prompt (and recomputed) tokens run through prefill
        self.cfg, self.bs = cfg, cfg.block_size_tokens
        self.max_seqs = cfg.max_num_seqs * dp
        self.budget = cfg.max_num_batched_tokens * dp
        self.prompt, self.out = isl.astype(np.int64), osl.astype(np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.computed = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.total_blocks = int(total_blocks)
        self.free_blocks = int(total_blocks)
        self.run = np.zeros(0, dtype=np.int64)
        self.waiting: deque[int] = deque()
        self._admitted_tokens: list[int] = []
        self.freed_last = 0  # blocks released by the last advance (finished requests)
        self.ratio = cfg.reserve_init_ratio if cfg.admission == "reserve_ratio" else 0.0

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    def _blocks_for(self, tokens: np.ndarray) -> np.ndarray:
        return -(-tokens // self.bs)

    def schedule(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(request ids, tokens each) for the next step, and the ids admitted from the queue in it."""
        if self.cfg.priority == "prefill_first":
            return self._prefill_first()
        return self._decode_first()

    def _decode_first(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        run = self.run
        pend = self.prompt[run] + self.generated[run] - self.computed[run]
        total = int(pend.sum())
        if total <= self.budget:  # every running request takes all it has pending
            n = pend
        else:
            before = np.cumsum(pend) - pend
            n = np.minimum(pend, np.maximum(self.budget - before, 0))
        preempted = self._fit_kv(n)
        run = self.run
        n = n[: len(run)]
        left = self.budget - int(n.sum())
        self._admitted_tokens = []
        admitted = [] if preempted else self._admit(left)
        if not admitted and bool((n > 0).all()):  # the running list as it stands
            return run, n, admitted
        ids = np.concatenate([run, np.asarray(admitted, dtype=np.int64)])
        ns = np.concatenate([n, np.asarray(self._admitted_tokens, dtype=np.int64)])
        keep = ns > 0
        return ids[keep], ns[keep], admitted

    def _prefill_first(self) -> tuple[np.ndarray, np.ndarray, list[int]]:
        run = self.run
        pend = self.prompt[run] + self.generated[run] - self.computed[run]
        mid = pend > 1
        if mid.any() or (self.waiting and len(run) < self.max_seqs):
            ids0, pend0 = run[mid], pend[mid]
            before = np.cumsum(pend0) - pend0
            n0 = np.minimum(pend0, np.maximum(self.budget - before, 0))
            left = self.budget - int(n0.sum())
            self._fit_kv_subset(ids0, n0)
            admitted = self._admit(left)
            ids = np.concatenate([ids0, np.asarray(admitted, dtype=np.int64)])
            ns = np.concatenate([n0, np.asarray(self._admitted_tokens, dtype=np.int64)])
            keep = ns > 0
            if keep.any():
                return ids[keep], ns[keep], admitted
        # decode (also when no prefill chunk got KV: decoding frees it); all stalled mid-prefill -> retract newest
        n = np.where(pend == 1, 1, 0).astype(np.int64)
        if not n.any() and len(run) > 1:
            self._preempt(int(run[-1]))
            self.run = run[:-1]
            return self._prefill_first()
        self._fit_kv(n)
        n = n[: len(self.run)]
        keep = n > 0
        return self.run[keep], n[keep], []

    def _fit_kv(self, n: np.ndarray) -> bool:
        """Allocate blocks for n tokens of each running request; preempt from the tail until they fit.
        Returns whether anything was preempted (self.run shrinks; n's prefix stays aligned with it)."""
        run = self.run
        need = self._blocks_for(self.computed[run] + n) - self.blocks[run]
        need = np.maximum(need if self.no_off else need - self.off[run], 0)
        total = int(need.sum())
        preempted = False
        while total > self.free_blocks and len(run) > 1:
            victim = int(run[-1])
            total -= int(need[len(run) - 1])
            self._preempt(victim)
            run, need = run[:-1], need[:-1]
            preempted = True
        self.run = run
        if total > self.free_blocks:  # one request alone cannot grow: the caller checked capacity up front
            raise RuntimeError("KV capacity below one request")
        self.blocks[run] += need
        self.free_blocks -= total
        return preempted

    def _fit_kv_subset(self, ids: np.ndarray, n: np.ndarray) -> None:
        need = np.maximum(self._blocks_for(self.computed[ids] + n) - self.blocks[ids] - self.off[ids], 0)
        take = int(need.sum())
        if take <= self.free_blocks:
            self.blocks[ids] += need
            self.free_blocks -= take
            return
        for pos in range(len(ids)):  # not enough: grant in order, the rest compute nothing this step
            k = int(need[pos])
            if k > self.free_blocks:
                n[pos:] = 0
                break
            self.blocks[ids[pos]] += k
            self.free_blocks -= k

    def _preempt(self, i: int) -> None:
        own = int(self.blocks[i])
        swap = 0 < own <= self.host_free and not self.off[i]
        self.free_blocks += own + (self.pc.leave(i) if self.pc is not None else 0)
        self.blocks[i] = 0
        if swap:  # kept on the host: computed stays, the copy is priced (take_swaps)
            self.swapped[i], self.host_free = own, self.host_free - own
            self.swap_moved += own
        else:
            self.computed[i] = 0
        self.preemptions[i] += 1
        self.waiting.appendleft(i)
        if self.ratio:
            self.ratio = self.cfg.reserve_init_ratio

    def take_swaps(self) -> int:
        """Blocks copied between GPU and host since the last call (the loop prices them into the step)."""
        moved, self.swap_moved = self.swap_moved, 0
        self.swap_total += moved
        return moved

    def decay(self, steps: int) -> None:
        """reserve_ratio: the reserved share of future output falls linearly per step to its floor."""
        if self.ratio:
            c = self.cfg
            step = (c.reserve_init_ratio - c.reserve_min_ratio) / max(c.reserve_decay_steps, 1.0)
            self.ratio = max(c.reserve_min_ratio, self.ratio - step * steps)

    def _admit(self, budget: int) -> list[int]:
        """Admit queued requests FCFS into `budget` tokens; sets self._admitted_tokens aligned with the result."""
        admitted: list[int] = []
        tokens: list[int] = []
        room = self.max_seqs - len(self.run)
        if not self.waiting or budget <= 0 or room <= 0:  # nothing to admit: skip the reservation sums
            self._admitted_tokens = tokens
            return admitted
        reserve = self.cfg.admission == "reserve_full"
        run = self.run
        future = 0.0  # blocks held back for the running requests' output (reserve_ratio only)
        if self.ratio:
            left = np.minimum(self.out[run] - self.generated[run], CLIP_NEW_TOKENS)
            future = self.ratio * float(left.sum()) / self.bs
        while self.waiting and budget > 0 and len(admitted) < room:
            i = self.waiting[0]
            hit, off, claim = self.pc.hit(i) if self.pc is not None and not self.computed[i] else (0, 0, 0)
            pend = int(self.prompt[i] + self.generated[i] - self.computed[i]) - hit
            chunk = min(pend, budget) if self.cfg.chunked_prefill else (pend if pend <= budget else 0)
            if chunk <= 0:
                break
            want = int(self.prompt[i] + self.out[i]) if reserve else int(self.computed[i]) + hit + chunk
            need = int(-(-want // self.bs)) - int(self.blocks[i]) - off + claim
            own = self.ratio * float(min(self.out[i] - self.generated[i], CLIP_NEW_TOKENS)) / self.bs if self.ratio else 0.0
            if need > self.free_blocks or (need + future + own > self.free_blocks and (len(self.run) or admitted)):
                break
            future += own
            self.waiting.popleft()
            if self.pc is not None and not self.computed[i]:
                self.computed[i] = hit
                self.pc.admitted(i, hit, off, claim)
            if self.swapped[i]:  # copied back from the host tier
                self.swap_moved += int(self.swapped[i])
                self.host_free += int(self.swapped[i])
                self.swapped[i] = 0
            self.blocks[i] += need
            self.free_blocks -= need
            admitted.append(i)
            tokens.append(chunk)
            budget -= chunk
        if admitted:
            self.run = np.concatenate([self.run, np.asarray(admitted, dtype=np.int64)])
        self._admitted_tokens = tokens
        return admitted

    def advance(self, ids: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply a step: computed += n. Returns (ids that emitted a token, ids that finished); finished ones
        leave the running list and free their blocks."""
        pend = self.prompt[ids] + self.generated[ids] - self.computed[ids]
        self.prefilled[ids] += np.where((self.generated[ids] == 0) | (pend > 1), n, 0)
        self.computed[ids] += n
        if self.pc is not None:
            self.pc.computed_prefix(ids, self.computed, self.prompt, self.blocks)
        self.decay(1)
        emit = ids[self.computed[ids] == self.prompt[ids] + self.generated[ids]]
        self.generated[emit] += 1
        return emit, self._release(emit)

    def _release(self, ids: np.ndarray) -> np.ndarray:
        """Finished requests among ids leave the running list and free their blocks; returns them."""
        done: np.ndarray = ids[self.generated[ids] >= self.out[ids]]
        self.freed_last = int(self.blocks[done].sum()) if len(done) else 0
        if self.pc is not None:
            self.freed_last += sum(self.pc.leave(int(i)) for i in done)
        if len(done):
            self.free_blocks += self.freed_last
            self.blocks[done] = 0
            run = self.run
            self.run = run[self.generated[run] < self.out[run]]
        return done

    def decode_room(self, ids: np.ndarray, k: int) -> int:
        """How many of the next k pure-decode steps of `ids` (the first already allocated) fit in free KV:
        request i needs a new block after s_i = blocks·bs − computed − 1 more steps, then every bs steps."""
        if self.cfg.admission == "reserve_full" or k <= 1:
            return k
        held = self.blocks[ids] if self.no_off else self.blocks[ids] + self.off[ids]
        slack = held * self.bs - self.computed[ids] - 1

        def extra(steps: int) -> int:  # blocks needed beyond those held to run `steps` steps
            over = steps - 1 - slack
            return int(np.maximum(-(-over // self.bs), 0).sum())

        if extra(k) <= self.free_blocks:  # the whole run fits (extra grows with steps): no search
            return k
        lo, hi = 1, k - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if extra(mid) <= self.free_blocks else (lo, mid - 1)
        return lo

    def advance_decode(self, ids: np.ndarray, k: int) -> np.ndarray:
        """Apply k pure-decode steps to ids (each emits one token per step; decode_room checked the KV).
        Returns the ids that finished."""
        c = self.computed[ids] + k
        if self.cfg.admission != "reserve_full":
            need = -(-c // self.bs) - self.blocks[ids]
            need = np.maximum(need if self.no_off else need - self.off[ids], 0)
            self.blocks[ids] += need
            self.free_blocks -= int(need.sum())
        self.computed[ids] = c
        self.generated[ids] += k
        self.decay(k)
        return self._release(ids)
