"""Which of issue 18's physics changes moves the cross-validated error, and how: one change reverted at a time.

Usage: .venv/bin/python bench/ablate_issue18.py [CSV]

Each variant re-runs leave-one-model-out (every fold refitted from the built-in defaults, as `validate --cv` and
data-build/validation_report.py do) on the dev CSV with one of the new terms put back as it was before issue 18:
  shipped            the model as shipped (engine defaults by version, skewed routing, marginal interference,
                     overlap_exposed_frac fitted, router weights read)
  uniform-routing    experts routed uniformly (E·(1 − (1 − k/E)^T) touched)
  overlap-trtllm     the overlap scheduler only on TRT-LLM (the pre-issue engines.toml), whatever the version
  no-exposed-cpu     overlapping engines hide all their CPU time (overlap_exposed_frac held at 0)
  weight-reread      prompts in the decode steps pay their whole prefill again (weights and collective latency)
  moe-curve          routed experts at aiconfigurator's measured per-op curve where one covers the case
The variants patch the model in this process only (the fold workers fork from it). Prints one table (markdown).
What it does not: write any file, or choose between the variants (the shipped model is chosen on physics).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import servescope.perfmodel.deployment as dep
import servescope.perfmodel.serving as serving
import servescope.perfmodel.step as step
import servescope.validation.fit as fit
from servescope.perfmodel.efficiency import Efficiency, unfitted_start
from servescope.validation.crossval import cross_validate
from servescope.validation.fit import fit_data
from servescope.validation.validate import read_rows

DEV = Path(__file__).resolve().parents[1] / "tests/data/validation/measured_serving_dev.csv"


def _uniform() -> None:
    step.touched_experts = lambda r, mt, e, k, t: np.asarray(e * (1 - (1 - k / e) ** np.asarray(t, float)))


def _overlap_trtllm() -> None:
    dep.Deployment.overlaps_cpu = property(  # type: ignore[assignment]
        lambda self: self.overlap_scheduler if self.overlap_scheduler is not None else self.backend == "trtllm")


def _weight_reread() -> None:
    serving._marginal = lambda pf, k: 0.0 if k == "overhead" else pf[k]  # type: ignore[assignment]


VARIANTS: dict[str, tuple[Callable[[], None] | None, dict[str, Any]]] = {
    "shipped": (None, {}),
    "uniform-routing": (_uniform, {}),
    "overlap-trtllm": (_overlap_trtllm, {}),
    "no-exposed-cpu": (None, {"drop": "overlap_exposed_frac"}),
    "weight-reread": (_weight_reread, {}),
    "moe-curve": (None, {"start": {"moe_curve": 1.0}}),
    "no-op-curves": (None, {"start": {"op_curves": 0.0}}),
    "moe-curve-only": (None, {"start": {"op_curves": 0.0, "moe_curve": 1.0}}),
}


def run(csv: str, name: str) -> str:
    patch, opts = VARIANTS[name]
    if patch is not None:
        patch()
    params = dict(fit.FITTED)
    if "drop" in opts:
        params.pop(opts["drop"])
    start: Efficiency = unfitted_start().scaled(**opts.get("start", {}))
    data = fit_data(read_rows(csv))
    t0 = time.perf_counter()
    cv = cross_validate(data, start, params=params,
                        groupings={"leave_one_model_out": "model", "leave_one_system_out": "system"}, workers=2,
                        fold_start=start)
    s, o = cv.summaries["leave_one_model_out"], cv.summaries["leave_one_system_out"]
    return (f"| {name} | {s.tpot_mape:.1%} | {s.tpot_bias:+.1%} | {s.ttft_mape:.1%} | {s.ttft_bias:+.1%} | "
            f"{o.tpot_mape:.1%} | {o.tpot_bias:+.1%} | {time.perf_counter() - t0:.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--variant", choices=sorted(VARIANTS), help="one variant (each runs in its own process)")
    args = ap.parse_args()
    if args.variant:
        print(run(args.csv, args.variant))
        return
    import subprocess
    import sys

    print("| variant | LOMO TPOT MAPE | LOMO TPOT bias | LOMO TTFT MAPE | LOMO TTFT bias | LOSO TPOT MAPE | "
          "LOSO TPOT bias | time |")
    print("|---|---|---|---|---|---|---|---|")
    for name in VARIANTS:  # a fresh process per variant: the patches do not leak into each other
        out = subprocess.run([sys.executable, __file__, args.csv, "--variant", name], capture_output=True, text=True,
                             check=True).stdout
        print(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
