"""Block-level prefix caching in the simulation (issue 29.4): which prompt tokens a request finds in the KV cache
when it is admitted, and which KV blocks several requests share.

Hits are whole KV blocks, and at most ⌊(prompt − 1) / block⌋ of them: an engine recomputes at least the prompt's
last token to produce logits (vLLM v1 KVCacheManager.get_computed_blocks caps a hit at num_tokens − 1 and hashes
full blocks only; SGLang's radix cache likewise leaves one token to compute). A hit skips those tokens' prefill:
the request enters the step with `computed` = hit tokens, its chunks attend to them as context (stepcost.py).
Two sources:
  hit rate h  (`--prefix-hit-rate`, or the rate an engine's /metrics measured): request i finds
              ⌊h · prompt_i / block + u_i⌋ blocks (capped as above), u_i = frac(i · φ⁻¹), an equidistributed
              sequence: the blocks are h · prompt on average within a block over the run, with no random draw.
              Its KV is counted per request (the hit's source is anonymous: an upper bound on the blocks in use).
  shared prefix of LEN tokens (`--workload shared-prefix:LEN`, the benchmark clients' shared-system-prompt sets):
              ⌊LEN / block⌋ blocks are common to every request. Until one request has computed them, requests
              compute their own copy (no hit for requests admitted in the same steps, as an engine that hashes
              computed blocks only); from then on every admission hits min(⌊LEN / block⌋, ⌊(prompt − 1)/block⌋)
              blocks, and those blocks are counted once in the KV capacity (reference-counted; when the last
              holder leaves they return to the free pool and are claimed again by the next admission — no eviction
              of a prefix a running request holds, none of a cached one while there is room).
What it does not: model eviction under pressure of cached-but-free blocks, multi-turn reuse, or the radix tree's
partial-block matches.
"""

from __future__ import annotations

import numpy as np

from servescope.errors import ScenarioError

GOLDEN = 0.6180339887498949  # φ⁻¹: the additive recurrence frac(i·φ⁻¹) is the most evenly spread in [0, 1)


def parse_workload(text: str | None) -> int:
    """`--workload`: None or "random" -> 0 shared tokens; "shared-prefix:LEN" -> LEN (≥ 1); ScenarioError else."""
    if text is None or text.strip() == "random":
        return 0
    kind, _, arg = text.strip().partition(":")
    if kind == "shared-prefix":
        try:
            if int(arg) >= 1:
                return int(arg)
        except ValueError:
            pass
    raise ScenarioError(f"--workload {text!r}: expected random or shared-prefix:LEN (LEN ≥ 1 tokens shared by every "
                        "prompt)")


def check_hit_rate(h: float) -> float:
    if not 0.0 <= h <= 1.0 or h != h:
        raise ScenarioError(f"--prefix-hit-rate {h}: expected a fraction in [0, 1]")
    return float(h)


class PrefixCache:
    """Per-request hit blocks and the shared prefix's reference count (module docstring). `off[i]`: blocks of the
    shared prefix request i references (not its own); `claim`: blocks an admission must take from the free pool."""

    def __init__(self, isl: np.ndarray, block: int, hit_rate: float = 0.0, shared_tokens: int = 0):
        n = len(isl)
        self.bs = block
        cap = np.maximum((isl.astype(np.int64) - 1) // block, 0)
        self.enabled = hit_rate > 0 or shared_tokens >= block
        self.hit_blocks = np.zeros(n, dtype=np.int64)
        if hit_rate > 0:
            u = (np.arange(n, dtype=float) * GOLDEN) % 1.0
            self.hit_blocks = np.minimum(np.floor(hit_rate * isl / block + u).astype(np.int64), cap)
        self.shared = shared_tokens // block
        self.shared_cap = np.minimum(cap, self.shared)
        self.off = np.zeros(n, dtype=np.int64)
        self.ready, self.held, self.refs = False, False, 0
        self.cached = np.zeros(n, dtype=np.int64)  # prompt tokens found in the cache, summed over admissions

    def hit(self, i: int) -> tuple[int, int, int]:
        """(tokens found, shared blocks referenced, blocks to claim) for request i admitted with nothing computed."""
        if self.hit_blocks[i]:
            return int(self.hit_blocks[i]) * self.bs, 0, 0
        if self.ready and self.shared_cap[i]:
            return int(self.shared_cap[i]) * self.bs, int(self.shared_cap[i]), 0 if self.held else self.shared
        return 0, 0, 0

    def admitted(self, i: int, tokens: int, off: int, claim: int) -> None:
        self.cached[i] += tokens
        if off:
            self.off[i] = off
            self.refs += 1
            self.held = self.held or claim > 0

    def leave(self, i: int) -> int:
        """Request i leaves (finished or preempted): the shared blocks freed with it (0 unless it was the last)."""
        if not self.off[i]:
            return 0
        self.off[i] = 0
        self.refs -= 1
        if self.refs == 0 and self.held:
            self.held = False
            return self.shared
        return 0

    def computed_prefix(self, ids: np.ndarray, computed: np.ndarray, prompt: np.ndarray, blocks: np.ndarray) -> None:
        """After a step: the first request that has computed the whole shared prefix hands its blocks to the shared
        pool (its own block count falls by them; the pool is counted once from then on)."""
        if self.ready or not self.shared:
            return
        need = self.shared * self.bs
        ok = ids[(self.off[ids] == 0) & (computed[ids] >= need) & (self.shared_cap[ids] == self.shared)]
        if len(ok):
            i = int(ok[0])
            blocks[i] -= self.shared
            self.off[i] = self.shared
            self.ready, self.held, self.refs = True, True, 1
