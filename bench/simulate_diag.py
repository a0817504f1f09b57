"""Per-row diagnostic of the simulated TTFT/TPOT on the dev CSV subsample (issue 8): where the simulation is off.

Usage: .venv/bin/python bench/simulate_diag.py [--stride 8] [--workers 2] [--waves 4] [--range-ratio 1.0]
One closed-loop simulation per subsample row (validation.simulate_fit.stratified_rows) with the shipped global
efficiencies (or the given prefill_eff / set-up), then the median simulated ÷ measured TTFT and TPOT and their MAPE
by backend × concurrency bucket × prompt length. A diagnostic, in-sample: nothing is fitted here.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.errors import ScenarioError  # noqa: E402
from servescope.perfmodel.efficiency import global_efficiency  # noqa: E402
from servescope.validation.simulate_fit import stratified_rows  # noqa: E402
from servescope.validation.simulate_rows import simulate_row  # noqa: E402
from servescope.validation.validate import read_rows  # noqa: E402

DEV = ROOT / "tests/data/validation/measured_serving_dev.csv"
ROW_LIMIT_S = 60


class _Slow(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Slow


def _one(args: tuple) -> tuple[float, float, float, int]:
    sc, c, kw = args
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ROW_LIMIT_S)
    t = time.perf_counter()
    try:
        r = simulate_row(sc, c, **kw)
    except ScenarioError:
        return float("nan"), float("nan"), float("nan"), 0
    except _Slow:
        print(f"SLOW >{ROW_LIMIT_S}s: {sc.model.name} {sc.gpu.name} tp{sc.tp} dp{sc.dp} {sc.backend} c{c} "
              f"{sc.isl}/{sc.osl}", file=sys.stderr, flush=True)
        return float("nan"), float("nan"), float("nan"), -1
    finally:
        signal.alarm(0)
    dt = time.perf_counter() - t
    if dt > 5:
        print(f"{dt:.0f}s: {sc.model.name} {sc.gpu.name} tp{sc.tp} dp{sc.dp} {sc.backend} c{c} {sc.isl}/{sc.osl}",
              file=sys.stderr, flush=True)
    return r.ttft.mean_s, r.tpot.mean_s, r.ttft.p50_s, r.queueing.preemptions


def _bucket(c: int) -> str:
    return "c<=8" if c <= 8 else "c16-32" if c <= 32 else "c64-128" if c <= 128 else "c>128"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stride", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--waves", type=int, default=10)
    ap.add_argument("--range-ratio", type=float, default=0.8)
    ap.add_argument("--max-prompts", type=int, default=2048)
    ap.add_argument("--prefill-eff", type=float, default=None)
    ap.add_argument("--setup-ms", type=float, default=None)
    ap.add_argument("--csv-out", type=Path, default=None)
    a = ap.parse_args()
    eff = global_efficiency()
    if a.prefill_eff is not None:
        eff = replace(eff, prefill_eff=a.prefill_eff)
    if a.setup_ms is not None:
        eff = replace(eff, prefill_overhead_s=a.setup_ms / 1e3)
    sub = stratified_rows(read_rows(DEV), a.stride)
    kw = dict(waves=a.waves, range_ratio=a.range_ratio, max_prompts=a.max_prompts)
    t0 = time.perf_counter()
    tasks = [(replace(r.scenario, efficiency=eff), r.concurrency, kw) for r in sub]
    with ProcessPoolExecutor(a.workers) as ex:
        res = np.array(list(ex.map(_one, tasks, chunksize=2)), dtype=float)
    wall = time.perf_counter() - t0
    mt = np.array([r.ttft_ms for r in sub]) / 1e3
    mp = np.array([r.tpot_ms for r in sub]) / 1e3
    rt, rp = res[:, 0] / mt, res[:, 1] / mp
    ok = np.isfinite(rt)
    print(f"{len(sub)} rows, {int((~ok).sum())} failed, {wall:.0f} s; options {kw}, pe {eff.prefill_eff:.3f} "
          f"setup {eff.prefill_overhead_s * 1e3:.1f} ms")
    print(f"ALL TTFT MAPE {np.mean(np.abs(rt[ok] - 1)):.1%} med {np.median(rt[ok]):.2f}  "
          f"TPOT MAPE {np.mean(np.abs(rp[ok] - 1)):.1%} med {np.median(rp[ok]):.2f}")
    keys = [(r.backend, _bucket(r.concurrency), "isl8k" if r.scenario.isl >= 4000 else "isl<=2k") for r in sub]
    for k in sorted(set(keys)):
        m = np.array([kk == k for kk in keys]) & ok
        if m.any():
            print(f"{k[0]:7s} {k[1]:8s} {k[2]:8s} n={int(m.sum()):3d} TTFT med {np.median(rt[m]):6.2f} "
                  f"MAPE {np.mean(np.abs(rt[m] - 1)):6.1%}  TPOT med {np.median(rp[m]):5.2f} "
                  f"MAPE {np.mean(np.abs(rp[m] - 1)):6.1%}  preempt rows {int((res[m, 3] > 0).sum())}")
    if a.csv_out:
        with open(a.csv_out, "w") as f:
            f.write("id,backend,model,system,c,isl,osl,meas_ttft_ms,sim_ttft_ms,sim_ttft_p50_ms,meas_tpot_ms,"
                    "sim_tpot_ms,preemptions\n")
            for r, x in zip(sub, res, strict=True):
                f.write(f"{r.id},{r.backend},{r.model},{r.system},{r.concurrency},{r.scenario.isl},"
                        f"{r.scenario.osl},{r.ttft_ms:.1f},{x[0] * 1e3:.1f},{x[2] * 1e3:.1f},{r.tpot_ms:.2f},"
                        f"{x[1] * 1e3:.2f},{int(x[3])}\n")


if __name__ == "__main__":
    main()
