"""The shapes every mitigation track shares: its inputs (`Context`) and its answer (`Proposal`).

Does: hold the scenario, the evaluator and the user's constraints a track looks at, and the record a track
returns: applicable or why not, effort tier, preconditions, the validation gate, and the what-if to evaluate.
Does not: evaluate gains or rank (planner.plan does both, the same way for every track).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from servescope.calibrate import Calibration
from servescope.perfmodel.scenario import Scenario
from servescope.planner.kernels import KernelEvidence
from servescope.planner.speculative import SpecConfig
from servescope.planner.whatif import Evaluator, Outcome, WhatIf

EFFORTS = ("config change", "engine upgrade", "new kernel")


@dataclass(frozen=True)
class Context:
    """What a track may look at: the (calibrated) scenario, the evaluator, the baseline and the user's limits."""

    scenario: Scenario
    evaluator: Evaluator
    baseline: Outcome
    objective: str
    concurrency: int
    forbid: tuple[str, ...] = ()
    calibration: Calibration | None = None
    spec: SpecConfig | None = None
    kernels: KernelEvidence | None = None  # the trace's per-kernel numbers (advise.kernel_evidence)
    applied: tuple[str, ...] = ()  # tracks already applied: the evaluator's baseline includes them
    option: str | None = None  # one option to price instead of the track's best (quantization: a ledger row's change)

    @property
    def n_gpus(self) -> int:
        return self.scenario.n_gpus

    @cached_property
    def link(self) -> str:
        """The fabric the TP group's collectives run over, as `specs.collectives` resolved it for this scenario
        (the one derivation the step model also prices): 'nvlink', 'pcie_p2p' or 'pcie_no_p2p'."""
        from servescope.specs.collectives import load_collectives

        sc = self.scenario
        return load_collectives(sc.gpu, max(int(sc.tp), 1), sc.interconnect).interconnect

    @property
    def pcie(self) -> bool:
        """True when the TP group talks over PCIe (with or without peer-to-peer access)."""
        return self.link != "nvlink"


@dataclass(frozen=True)
class Proposal:
    """A track's answer before evaluation. `whatif` is None when the track does not apply.

    `bounds` optionally holds (pessimistic, optimistic) what-ifs (e.g. low and high acceptance);
    `explain` turns the evaluated gain into a sentence when the track applies but does not pay.
    """

    kind: str
    applicable: bool
    why_not: str | None
    effort: str
    preconditions: tuple[str, ...]
    validate: str
    whatif: WhatIf | None = None
    bounds: tuple[WhatIf, WhatIf] | None = None
    precision_lowering: bool = False
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def not_applicable(kind: str, why: str, effort: str, validate: str = "", *pre: str, **details: Any) -> Proposal:
    return Proposal(kind, False, why, effort, tuple(pre), validate, details=dict(details))
