"""Grid sweep in two tiers (issue 30.4): 10⁶ points screened on this machine, against the full closed form.

What it does, in one process (a fresh interpreter per part so each part's peak RSS is its own):
  screen  planner.screen.screen_grid on a grid of about 10⁶ points (default: qwen3-30b-a3b on 8 × h100_sxm, 8 layouts
          × 2 quantisations × 50 ISL × 50 OSL × 25 concurrencies): wall seconds, µs per point, peak RSS (ru_maxrss)
          above the interpreter's after its imports, and the budget's estimate (planner.screen.grid_bytes)
  exact   the full closed form (perfmodel.serving.predict_arrays, one call per configuration × ISL × OSL with every
          concurrency, as the exact tier calls it) on `--exact-sample` of those scenarios: µs per point, and the
          ratio to the screen's; the grid point by point at that rate
  tiers   planner.sweep_grid.grid_sweep with an SLA (TTFT ≤ 2 s, TPOT ≤ 50 ms): the screen error on 2,000 held-out
          points and the margin, points passed to the full closed form (count, share of the grid), simulated, wall
          seconds; with --ray ADDRESS (or "local") the same sweep with the simulations on Ray, and whether the two
          documents are identical
What it does not: run in CI or assert anything; the targets (≤ 60 s on 2 cores, identical with Ray) are read off.

    python bench/bench_sweep_grid.py [--part screen|exact|tiers|all] [--ray local|ADDRESS] [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

MODEL, GPU, N_GPUS = "qwen3-30b-a3b", "h100_sxm", 8
SLA_TTFT_S, SLA_TPOT_S = 2.0, 0.050


def _grid(small: bool):  # noqa: ANN202 (the import is lazy: a part's RSS starts after it)
    import numpy as np

    from servescope.planner.screen import Grid

    n_len, n_c = (8, 6) if small else (50, 25)
    isl = tuple(int(x) for x in np.unique(np.geomspace(128, 32768, n_len).round()))
    osl = tuple(int(x) for x in np.unique(np.geomspace(64, 8192, n_len).round()))
    conc = tuple(int(x) for x in np.unique(np.geomspace(1, 1024, n_c).round()))
    return Grid(N_GPUS, True, conc, isl, osl, ("base", "fp8"))


def _base():  # noqa: ANN202
    from servescope.perfmodel import Scenario

    return Scenario.build(model=MODEL, gpu=GPU, tp=1)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def part_screen(small: bool) -> dict[str, float]:
    from servescope.planner.screen import grid_bytes, screen_grid

    base, grid = _base(), _grid(small)
    rss0 = _rss_mib()
    t = time.perf_counter()
    s = screen_grid(base, grid)
    wall = time.perf_counter() - t
    n = int(s.values["tpot_s"].size)
    return {"points": n, "grid": grid.size, "configs": len(s.configs), "wall_s": wall, "us_per_point": wall / n * 1e6,
            "rss_above_imports_mib": _rss_mib() - rss0, "rss_mib": _rss_mib(), "estimate_mib": grid_bytes(grid) / 2**20}


def part_exact(small: bool, sample: int) -> dict[str, float]:
    import numpy as np

    from servescope.planner.screen import configs
    from servescope.planner.sweep_grid import exact_points

    base, grid = _base(), _grid(small)
    cfgs, _ = configs(base, grid)
    rng = np.random.default_rng(0)
    picks = [(cfgs[rng.integers(len(cfgs))], grid.isl[rng.integers(len(grid.isl))],
              grid.osl[rng.integers(len(grid.osl))]) for _ in range(sample)]
    t = time.perf_counter()
    for cfg, isl, osl in picks:
        exact_points(cfg.scenario, isl, osl, grid.concurrency)
    wall = time.perf_counter() - t
    per = wall / (sample * len(grid.concurrency))
    return {"scenarios": sample, "points": sample * len(grid.concurrency), "wall_s": wall, "us_per_point": per * 1e6,
            "grid_point_by_point_s": per * grid.size}


def part_tiers(small: bool, ray: str | None) -> dict[str, object]:
    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep
    from servescope.report.sweep_grid_doc import grid_document

    base, grid = _base(), _grid(small)
    sla = Sla(SLA_TTFT_S, SLA_TPOT_S)
    t = time.perf_counter()
    gs = grid_sweep(base, grid, sla)
    wall = time.perf_counter() - t
    doc = grid_document(gs)
    out: dict[str, object] = {
        "grid": grid.size, "screened": gs.screened, "near": len(gs.points), "near_share": len(gs.points) / gs.screened,
        "front": sum(p.on_front for p in gs.points), "simulated": gs.simulated, "wall_s": wall,
        "max_rel": gs.error.max_rel, "p99_rel": gs.error.p99_rel, "margin": gs.margin, "sample": gs.error.sample,
        "rss_mib": _rss_mib()}
    if ray is not None:
        t = time.perf_counter()
        on_ray = grid_document(grid_sweep(base, grid, sla, ray=ray))
        out["ray_wall_s"] = time.perf_counter() - t
        out["ray_identical"] = json.dumps(on_ray, sort_keys=True) == json.dumps(doc, sort_keys=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=("screen", "exact", "tiers", "all"))
    ap.add_argument("--ray", default=None)
    ap.add_argument("--small", action="store_true", help="a 4,608-point grid (a quick check of the script)")
    ap.add_argument("--exact-sample", type=int, default=200)
    a = ap.parse_args()
    if a.part == "all":
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for part in ("screen", "exact", "tiers"):
            cmd = [sys.executable, __file__, "--part", part, "--exact-sample", str(a.exact_sample)]
            cmd += ["--small"] if a.small else []
            cmd += ["--ray", a.ray] if a.ray and part == "tiers" else []
            subprocess.run(cmd, check=True)
        return
    if a.part == "screen":
        res: dict[str, object] = part_screen(a.small)  # type: ignore[assignment]
    elif a.part == "exact":
        res = part_exact(a.small, a.exact_sample)  # type: ignore[assignment]
    else:
        res = part_tiers(a.small, a.ray)
    print(json.dumps({"part": a.part, **res}, indent=None, default=float))


if __name__ == "__main__":
    main()
