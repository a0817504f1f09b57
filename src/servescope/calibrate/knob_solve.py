"""The figures of a calibration sorted for the fit (calibrate.figure_fit) and the names they use.

Does: hold the sorted figures (`Problem`: the TPOT of each load point, outputs, TTFTs, shares, notes, and the
uncalibrated model at their concurrencies) and name what a share measures (`share_name`: a kernel class or a
collective of analysis.vocab).
Does not: fit (calibrate.terms) or word the result (calibrate.figure_fit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servescope.analysis.vocab import COLLECTIVES
from servescope.calibrate.figures import Figure
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import ServingPoint

FIXED_TERMS = ("weights", "overhead")  # the batch-independent part of a decode step (calibrate.levels)
COMM = "communication"
CLASS_KNOBS = {"gemm": ("gemm_bw_eff", "compute_eff"), "moe": ("moe_bw_eff", "moe_compute_eff"),
               "attention": ("attn_bw_eff", "attn_compute_eff")}
COLLECTIVE_SHARES = (COMM, *COLLECTIVES, "gather_logits")


def share_name(f: Figure) -> str:
    return f.metric.removesuffix("_share")


@dataclass
class Problem:
    """The figures sorted for the fit (calibrate.figure_fit), and the model's uncalibrated points at their
    concurrencies."""

    sc: Scenario
    at: dict[int, ServingPoint]
    tpot: list[tuple[Figure, float]]  # (figure, measured TPOT s) of each load point
    shares: list[Figure]
    notes: list[str]
    outputs: list[Figure] = field(default_factory=list)  # measured output tok/s figures
    ttft: list[Figure] = field(default_factory=list)  # measured TTFT figures
    spec: list[Figure] = field(default_factory=list)  # measured speculative-decoding figures (the planner's)

    @property
    def comm_pinned(self) -> bool:
        return any(share_name(f) in COLLECTIVE_SHARES for f in self.shares)
