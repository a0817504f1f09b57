"""Issue 27.3: leave-one-model-out TPOT/TTFT error with and without the MoE routing-kernel term (perfmodel/moe_host.py),
overall and for the small-active MoE models of the dev CSV (gpt-oss, Qwen3 MoE, MiniMax).

Usage: .venv/bin/python bench/ablate_issue27_routing.py [CSV] [--variant shipped|no-routing|nvidia-4]

Each variant re-runs leave-one-model-out (every fold refitted from the built-in defaults, as `validate --cv` and
data-build/validation_report.py do; bench/ablate_issue18.py is the model) in a fresh process:
  shipped      the model with the routing kernels of a graphed decode step at their measured duration
  no-routing   the same model with that term at 0 (moe_routing_s patched in this process only)
  nvidia-4     a sensitivity, not shipped: on NVIDIA GPUs the B200 trace's own count (4 routing kernels per MoE layer,
               TRT-LLM-gen's stack) instead of the decode trace's 6 (step_host_cost.toml [trace.*])
Prints one markdown table: per slice the out-of-fold TPOT MAPE and bias, TTFT MAPE. MAPE and bias are over the
slice's rows (denominator: measured TPOT / TTFT of each row).
What it does not: write any file, or tune the term (its numbers come from traces: step_host_cost.toml).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import servescope.perfmodel.moe_host as moe_host
import servescope.perfmodel.step as step
import servescope.validation.fit as fit
from servescope.perfmodel.efficiency import unfitted_start
from servescope.specs import tables
from servescope.validation.crossval import cross_validate
from servescope.validation.fit import fit_data
from servescope.validation.validate import read_rows

DEV = Path(__file__).resolve().parents[1] / "tests/data/validation/measured_serving_dev.csv"
# slices: (label, substrings of the model label any of which selects a row, substring of the system label)
SLICES = (("gpt-oss", ("gpt-oss",), ""), ("gpt-oss on H100", ("gpt-oss",), "h100"),
          ("gpt-oss on B200", ("gpt-oss",), "b200"), ("Qwen3 MoE: Qwen3-235B-A22B, Qwen3.5-397B-A17B", ("qwen3-235b", "qwen3.5-397b"), ""),
          ("MiniMax", ("minimax",), ""), ("MiniMax on H100", ("minimax",), "h100"),
          ("small-active MoE (the three)", ("gpt-oss", "qwen3-235b", "qwen3.5-397b", "minimax"), ""),
          ("dense models", ("llama", "qwen3-32b"), ""))


def _no_routing() -> None:
    step.moe_routing_s = lambda n, vendor, graphed: np.zeros_like(np.asarray(graphed, dtype=float))  # type: ignore[assignment]


def _nvidia_4() -> None:
    c = dict(moe_host.routing_constants())
    n_b200 = float(tables.step_host_cost()["trace"]["vllm_eager_prefill_b200"]["routing_kernels_per_moe_layer"])
    moe_host.routing_s_per_moe_layer = lambda vendor: (  # type: ignore[assignment]
        (n_b200 if vendor == "nvidia" else c["routing_kernels_per_moe_layer"]) * moe_host.routing_kernel_s(vendor))


VARIANTS = {"no-routing": _no_routing, "shipped": None, "nvidia-4": _nvidia_4}


def run(csv: str, name: str) -> dict[str, list[float]]:
    patch = VARIANTS[name]
    if patch is not None:
        patch()
    start = unfitted_start()
    data = fit_data(read_rows(csv))
    cv = cross_validate(data, start, params=dict(fit.FITTED), groupings={"leave_one_model_out": "model"}, workers=2,
                        fold_start=start)
    pt, pf = cv.pred_tpot_s["leave_one_model_out"], cv.pred_ttft_s["leave_one_model_out"]
    models = np.array([str(m).lower() for m in data.labels["model"]])
    systems = np.array([str(m).lower() for m in data.labels["system"]])
    out: dict[str, list[float]] = {}
    for label, keys, system in (("all", ("",), ""), *SLICES):
        m = np.array([any(k in x for k in keys) and system in y for x, y in zip(models, systems, strict=True)])
        et, ef = pt[m] / data.tpot_s[m] - 1.0, pf[m] / data.ttft_s[m] - 1.0
        out[label] = [float(m.sum()), float(np.mean(np.abs(et))), float(np.mean(et)), float(np.mean(np.abs(ef)))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run(args.csv, args.variant)))
        return
    res = {}
    for name in VARIANTS:  # a fresh process per variant: the patch does not leak
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, args.csv, "--variant", name], capture_output=True, text=True,
                             check=True).stdout
        res[name] = json.loads(out.strip().splitlines()[-1])
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print("| slice (rows) | LOMO TPOT MAPE before → after (nvidia-4) | TPOT bias before → after (nvidia-4) | "
          "TTFT MAPE before → after |")
    print("|---|---|---|---|")
    for label, (n, mape, bias, ttft) in res["shipped"].items():
        _, m0, b0, f0 = res["no-routing"][label]
        _, m4, b4, _ = res["nvidia-4"][label]
        print(f"| {label} ({n:.0f}) | {m0:.1%} → {mape:.1%} ({m4:.1%}) | {b0:+.1%} → {bias:+.1%} ({b4:+.1%}) | "
              f"{f0:.1%} → {ttft:.1%} |")


if __name__ == "__main__":
    main()
