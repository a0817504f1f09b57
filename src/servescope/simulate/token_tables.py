"""The step-size tables of stepcost.py, priced a block at a time on first read.

What it does: for step sizes T = 0 … top, the step model's (perfmodel.step.step_arrays) non-attention time
  dec(T)   gemm + moe + communication + kernels of a decode step of max(T, 1) sequences, one token each
  pf(T)    the same of a prefill step of dp chunks of max(T, 1)/dp tokens each, and kern_pf(T) its kernels alone
as stepcost.py's docstring defines them, each block of BLOCK sizes priced by one step_arrays call when a step first
reads it (an MoE model's; a dense model's tables are one block, priced whole on first read: one call over 8,192
sizes costs 2.5 ms there, less than the ~20 blocks a 300-request replay reads). The step model is elementwise in the step size (every term a function of its own T; the routing
statistics row by row: tests/simulate/test_simulate_fast_paths.py compares a block-built table with one call over
all sizes to the bit), so a block holds the whole table's values exactly. A run reads a handful of blocks (its
decode batches and its mixed steps' token counts; 4–23 blocks of 512 on the issue 30 grid's near points) while one
call over every size up to an attention-DP budget (8 × 8,192) costs ~0.5 s on an MoE model (the routing statistics
per size), superlinearly more than its blocks.
What it does not: price attention (per sequence and per chunk: stepcost.py) or the host time.
"""

from __future__ import annotations

import numpy as np

from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_arrays

BLOCK = 512  # step sizes priced per step_arrays call (MoE models)


def _f(a: dict[str, np.ndarray], key: str) -> np.ndarray:
    return np.asarray(a[key], dtype=float)


class TokenTables:
    """dec, pf and kern_pf (module docstring) at T = 0 … top, filled a block at a time; `dec_scale` multiplies dec
    as it is read (a measured decode level: the same product as scaling the whole table)."""

    def __init__(self, sc: Scenario, dp: int, top: int):
        self.sc, self.dp, self.top = sc, dp, top
        n = top + 1
        self._dec, self._pf, self._kern = np.empty(n), np.empty(n), np.empty(n)
        self.block = BLOCK if sc.model.is_moe else n
        blocks = -(-n // self.block)
        self._dec_done, self._pf_done = [False] * blocks, [False] * blocks
        self.dec_scale = 1.0

    def _sizes(self, blk: int) -> tuple[int, int, np.ndarray]:
        lo = blk * self.block
        hi = min(lo + self.block, self.top + 1)
        return lo, hi, np.maximum(np.arange(lo, hi, dtype=float), 1.0)

    def _fill_dec(self, blk: int) -> None:
        lo, hi, seqs = self._sizes(blk)
        dec = step_arrays(self.sc, seqs, 0, 1)
        self._dec[lo:hi] = _f(dec, "gemm") + _f(dec, "moe") + _f(dec, "communication") + _f(dec, "kernels")
        self._dec_done[blk] = True

    def _fill_pf(self, blk: int) -> None:
        lo, hi, seqs = self._sizes(blk)
        pf = step_arrays(self.sc, self.dp, 0, seqs / self.dp, prefill=True)
        self._pf[lo:hi] = _f(pf, "gemm") + _f(pf, "moe") + _f(pf, "communication") + _f(pf, "kernels")
        self._kern[lo:hi] = _f(pf, "kernels")
        self._pf_done[blk] = True

    def dec(self, t: int) -> np.float64:
        blk = t // self.block
        if not self._dec_done[blk]:
            self._fill_dec(blk)
        v: np.float64 = self._dec[t]
        return v if self.dec_scale == 1.0 else v * self.dec_scale

    def _priced_pf(self, t: int) -> None:
        blk = t // self.block
        if not self._pf_done[blk]:
            self._fill_pf(blk)

    def pf(self, t: int) -> np.float64:
        self._priced_pf(t)
        v: np.float64 = self._pf[t]
        return v

    def kern_pf(self, t: int) -> np.float64:
        self._priced_pf(t)
        v: np.float64 = self._kern[t]
        return v

    def whole(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(dec, pf, kern_pf) over every size (each block priced): tests and introspection."""
        for blk in range(len(self._dec_done)):
            if not self._dec_done[blk]:
                self._fill_dec(blk)
            if not self._pf_done[blk]:
                self._fill_pf(blk)
        dec = self._dec if self.dec_scale == 1.0 else self._dec * self.dec_scale
        return dec, self._pf.copy(), self._kern.copy()
