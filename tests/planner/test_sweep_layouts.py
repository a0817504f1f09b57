"""The sweep's layouts as plain data (planner/sweep.py): each a `Change` of the base scenario, priced as
`Scenario.build` prices the same layout and refused where build refuses it."""

from __future__ import annotations

import pytest

from servescope.errors import ScenarioError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import predict
from servescope.planner.layouts import Layout
from servescope.planner.sweep import layout_scenario


def test_a_sweep_layout_is_priced_as_the_same_layout_built_by_name() -> None:
    base = Scenario.build("qwen3-30b-a3b", "h100_sxm", tp=2, isl=2048, osl=256)
    built = Scenario.build("qwen3-30b-a3b", "h100_sxm", tp=1, ep=2, dp=2, isl=2048, osl=256)
    changed = layout_scenario(base, Layout(tp=1, ep=2, dp=2))
    assert (changed.tp, changed.ep, changed.dp, changed.pp) == (1, 2, 2, 1)
    assert [p.tpot_s for p in predict(changed, [1, 32])] == [p.tpot_s for p in predict(built, [1, 32])]


def test_a_sweep_layout_beyond_the_nvlink_domain_is_refused() -> None:
    with pytest.raises(ScenarioError, match="NVLink domain"):
        layout_scenario(Scenario.build("llama-3.1-8b", "h100_sxm"), Layout(tp=16, ep=1, dp=1))
