"""The one enumerator of parallel layouts of n GPUs, used by the sweep and by the `parallelism_change` track.

Layouts of n GPUs (pp = 1): every tp · dp = n with tp a divisor of n, and for MoE models each also with ep = tp · dp
(one expert slice per GPU) beside ep = 1 (experts on every GPU, split by TP).
Does not: decide whether a layout fits or pays (the model and the planner do).
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.errors import ScenarioError

# GPUs one layout may use: past a rack-scale domain (GB300 NVL72: 72) with room to spare; more is a typo, and
# every divisor of the count becomes a layout to price.
MAX_SWEEP_GPUS = 4096


@dataclass(frozen=True)
class Layout:
    tp: int
    ep: int
    dp: int

    def label(self) -> str:
        return f"TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else "") + (f" DP{self.dp}" if self.dp > 1 else "")


def layouts(n_gpus: int, moe: bool) -> list[Layout]:
    """TP × DP (and, for MoE, TP × DP with EP over all GPUs) for every divisor TP of n_gpus, by TP."""
    if not 1 <= n_gpus <= MAX_SWEEP_GPUS:
        raise ScenarioError(f"cannot lay out {n_gpus} GPUs: a sweep takes 1 to {MAX_SWEEP_GPUS}")
    out = []
    for tp in range(1, n_gpus + 1):
        if n_gpus % tp:
            continue
        dp = n_gpus // tp
        out.append(Layout(tp, 1, dp))
        if moe and n_gpus > 1:
            out.append(Layout(tp, n_gpus, dp))
    return out
