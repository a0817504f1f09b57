"""Mitigation planning: what-ifs on a (calibrated) scenario, ranked by gain, combined, with ceiling and verdict.

Public API: plan, Plan, Track, combine, SpecConfig, parse_target, parse_forbid, parse_acceptance,
parse_spec_method, spec_from_options, TRACK_KINDS. See docs/plan.md. Its
document and text are servescope.report.plan_doc / plan_text.
"""

from servescope.planner.plan import Plan, Track, combine, plan
from servescope.planner.speculative import SpecConfig, parse_spec_method, spec_from_options
from servescope.planner.target import Target, parse_acceptance, parse_target
from servescope.planner.tracks import TRACK_KINDS, parse_forbid

__all__ = [
    "TRACK_KINDS",
    "Plan",
    "SpecConfig",
    "Target",
    "Track",
    "combine",
    "parse_acceptance",
    "parse_forbid",
    "parse_spec_method",
    "parse_target",
    "plan",
    "spec_from_options",
]
