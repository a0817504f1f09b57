"""Grid sweep in two tiers (issue 30.4): 10⁶ points screened on this machine, against the full closed form.

What it does, in one process (a fresh interpreter per part so each part's peak RSS is its own):
  screen  planner.screen.screen_grid on a grid of about 10⁶ points (default: qwen3-30b-a3b on 8 × h100_sxm, 8 layouts
          × 2 quantisations × 50 ISL × 50 OSL × 25 concurrencies = 10⁶): wall seconds, µs per point, peak RSS (ru_maxrss)
          above the interpreter's after its imports, and the budget's estimate (planner.screen.grid_bytes)
  exact   the full closed form (perfmodel.serving.predict_arrays, one call per configuration × ISL × OSL with every
          concurrency, as the exact tier calls it) on `--exact-sample` of those scenarios, and one point per call:
          µs per point each way, the whole grid at those rates
  tiers   planner.sweep_grid.grid_sweep with an SLA (TTFT ≤ 2 s, TPOT ≤ 50 ms): the screen error on 2,000 held-out
          points and the margins, points passed to the full closed form (count, share of the grid), simulated, wall
          seconds by stage (--front: the near set holds each workload's front candidates, not its optimum's);
          --ray cluster starts a two-node Ray cluster on loopback (127.0.0.2 head, 127.0.0.3 worker) for it; with --ray ADDRESS (or "local") the same sweep with the simulations on Ray, and whether the two
          documents are identical; --simulate N|all and --workers W: how many near points are simulated and in
          how many processes (simulations per second, distinct runs, the time for all of them at that rate)
  waves   the simulated tier's request count (planner.sweep_sims.sim_requests = SIM_WAVES · c): `--points` near
          points of the tiers' sweep (seeded) simulated at 3, 4 and 16 waves of their concurrency; the largest
          relative difference of the means (TPOT, TTFT, output tok/s) against 16 waves, and seconds per run
--spec: the speculative grid instead (qwen3.5-35b-a3b, which has an MTP layer and a bundled MTP acceptance curve, on
8 × h100_sxm: 8 layouts × 2 quantisations × 4 settings (off, mtp:1, mtp:2, mtp:3) × 25 ISL × 25 OSL × 25
concurrencies = 10⁶).
What it does not: run in CI or assert anything; the targets (≤ 60 s on 2 cores, identical with Ray) are read off.

    python bench/bench_sweep_grid.py [--part screen|exact|tiers|waves|all] [--ray local|cluster|ADDRESS] [--small]
                                     [--spec] [--simulate N|all] [--workers W] [--points N]
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
SPEC_MODEL, SPECS = "qwen3.5-35b-a3b", "off,mtp:1,mtp:2,mtp:3"
SPEC = False  # --spec: the speculative grid
SLA_TTFT_S, SLA_TPOT_S = 2.0, 0.050
CONCURRENCY = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024)


def _grid(small: bool):  # noqa: ANN202 (the import is lazy: a part's RSS starts after it)
    import numpy as np

    from servescope.planner.screen import Grid
    from servescope.planner.sweep_spec import parse_specs

    n_len = 8 if small else (25 if SPEC else 50)
    isl = tuple(int(x) for x in np.unique(np.geomspace(128, 32768, n_len).round()))
    osl = tuple(int(x) for x in np.unique(np.geomspace(64, 8192, n_len).round()))
    conc = (1, 4, 16, 64, 256, 1024) if small else CONCURRENCY
    return Grid(N_GPUS, True, conc, isl, osl, ("base", "fp8"), parse_specs(SPECS if SPEC else "off"))


def _base():  # noqa: ANN202
    from servescope.perfmodel import Scenario

    return Scenario.build(model=SPEC_MODEL if SPEC else MODEL, gpu=GPU, tp=1)


def _cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (worker processes): on a shared machine the wall
    clock counts the others' load, this does not."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def part_screen(small: bool) -> dict[str, float]:
    from servescope.planner.screen import grid_bytes, screen_grid

    base, grid = _base(), _grid(small)
    rss0 = _rss_mib()
    t, cpu = time.perf_counter(), _cpu_s()
    s = screen_grid(base, grid)
    wall, cpu = time.perf_counter() - t, _cpu_s() - cpu
    n = int(s.values["tpot_s"].size)
    return {"points": n, "grid": grid.size, "configs": len(s.configs), "wall_s": wall, "cpu_s": cpu,
            "us_per_point": wall / n * 1e6, "cpu_us_per_point": cpu / n * 1e6,
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
    t = time.perf_counter()
    for k, (cfg, isl, osl) in enumerate(picks):  # one point per call: the old sweep's way with lengths varying
        exact_points(cfg.scenario, isl, osl, [grid.concurrency[k % len(grid.concurrency)]])
    single = (time.perf_counter() - t) / sample
    return {"scenarios": sample, "points": sample * len(grid.concurrency), "wall_s": wall, "us_per_point": per * 1e6,
            "grid_s": per * grid.size, "us_per_point_one_by_one": single * 1e6, "grid_one_by_one_s": single * grid.size}


def _stage_timer() -> dict[str, float]:
    """Seconds spent in each stage of grid_sweep (the module's functions wrapped, in this process only)."""
    from servescope.planner import sweep_grid

    spent: dict[str, float] = {}
    for name in ("screen_grid", "screen_error", "near_set", "exact_at", "_simulate"):
        fn = getattr(sweep_grid, name)

        def timed(*a: object, _fn=fn, _name=name, **k: object) -> object:  # noqa: ANN001
            t, cpu = time.perf_counter(), _cpu_s()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - t
                spent[_name + ":cpu"] = spent.get(_name + ":cpu", 0.0) + _cpu_s() - cpu

        setattr(sweep_grid, name, timed)
    return spent


def part_tiers(small: bool, ray: str | None, front: bool, simulate: int | None = 8,
               workers: int = 1) -> dict[str, object]:
    from servescope.cli._sweep_grid import ray_spread
    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep
    from servescope.report.sweep_grid_doc import grid_document

    base, grid = _base(), _grid(small)
    sla = Sla(SLA_TTFT_S, SLA_TPOT_S)
    stages = _stage_timer()
    t, cpu = time.perf_counter(), _cpu_s()
    gs = grid_sweep(base, grid, sla, front=front, simulate_max=simulate, workers=workers)
    wall, cpu = time.perf_counter() - t, _cpu_s() - cpu
    doc = grid_document(gs)
    plain = sum(p.spec == "off" for p in gs.points)
    sim_s = stages.get("_simulate", 0.0)
    out: dict[str, object] = {
        "grid": grid.size, "screened": gs.screened, "skipped": len(gs.skipped),
        "near": len(gs.points), "near_share": len(gs.points) / gs.screened, "near_plain": plain,
        "near_spec": len(gs.points) - plain, "best": sum(p.best for p in gs.points),
        "best_spec": sum(p.best and p.spec != "off" for p in gs.points), "simulated": gs.simulated,
        "simulation_runs": gs.runs, "workers": workers, "wall_s": wall, "cpu_s": cpu,
        "load_average": os.getloadavg()[0], "timings_s": dict(stages),
        "sims_per_s": gs.runs / sim_s if sim_s else None,
        "cpu_s_per_sim": stages.get("_simulate:cpu", 0.0) / gs.runs if gs.runs else None,
        "all_plain_near_s_at_that_rate": plain / (gs.runs / sim_s) if sim_s and gs.runs else None,
        "max_rel": gs.error.max_rel, "p99_rel": gs.error.p99_rel, "margin": gs.error.margin,
        "sample": gs.error.sample, "rss_mib": _rss_mib()}
    out["configs"] = {"quant": doc["axes"]["quant"], "spec": doc["axes"]["spec"]}
    if ray is not None:
        t = time.perf_counter()
        on_ray = grid_document(grid_sweep(base, grid, sla, front=front, simulate_max=simulate,
                                          spread=ray_spread(ray)))
        out["ray_wall_s"] = time.perf_counter() - t
        out["ray_identical"] = json.dumps(on_ray, sort_keys=True) == json.dumps(doc, sort_keys=True)
    return out


def part_waves(small: bool, points: int) -> dict[str, object]:
    """`points` plain near points (seeded) simulated at 3, 4 (SIM_WAVES) and 16 waves of their concurrency."""
    import numpy as np

    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep
    from servescope.simulate import simulate

    base, grid = _base(), _grid(small)
    gs = grid_sweep(base, grid, Sla(SLA_TTFT_S, SLA_TPOT_S), simulate_max=0)
    plain = [p for p in gs.points if p.spec == "off"]
    rng = np.random.default_rng(0)
    picks = [plain[i] for i in sorted(rng.choice(len(plain), size=min(points, len(plain)), replace=False))]
    layouts = {lay.label(): lay for lay in grid.layouts}
    dev: dict[int, list[list[float]]] = {3: [], 4: []}
    secs: dict[int, float] = {3: 0.0, 4: 0.0, 16: 0.0}
    from servescope.planner.screen import quant_scenario
    from servescope.planner.sweep import layout_scenario

    for p in picks:
        sc = layout_scenario(quant_scenario(base, p.quant), layouts[p.layout.label()]).with_(isl=p.isl, osl=p.osl)
        res = {}
        for w in (3, 4, 16):
            t = time.perf_counter()
            r = simulate(sc, "closed", p.concurrency, w * p.concurrency)
            secs[w] += time.perf_counter() - t
            res[w] = (r.tpot.mean_s, r.ttft.mean_s, r.output_tok_s)
        for w in (3, 4):
            dev[w].append([abs(a / b - 1.0) for a, b in zip(res[w], res[16], strict=True)])
    names = ("tpot", "ttft", "output_tok_s")
    return {"points": len(picks), "near_plain": len(plain),
            "max_rel_vs_16_waves": {w: dict(zip(names, np.max(d, axis=0).tolist(), strict=True)) for w, d in dev.items()},
            "p90_rel_vs_16_waves": {w: dict(zip(names, np.percentile(d, 90, axis=0).tolist(), strict=True))
                                    for w, d in dev.items()},
            "s_per_run": {w: v / len(picks) for w, v in secs.items()}}


QUIET_RAY = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _loopback_cluster() -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A two-node Ray cluster on loopback: a head on 127.0.0.2 and a worker node on 127.0.0.3, one CPU each, each
    in its own process group (Ray maps 127.0.0.1 to the machine's address; the rest of 127/8 stays loopback).
    The same set-up as tests/analysis/test_ranks_scale.py's fixture."""
    import socket
    from pathlib import Path

    ray_cli = str(Path(sys.executable).parent / "ray")
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, **QUIET_RAY}
    env.pop("RAY_ADDRESS", None)
    address, null = f"127.0.0.2:{port}", subprocess.DEVNULL
    head = subprocess.Popen([ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "1", "--node-ip-address",
                             "127.0.0.2", "--include-dashboard", "false", "--disable-usage-stats", "--block"],
                            env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, start_new_session=True,
                            stdout=null, stderr=null)
    time.sleep(15)
    worker = subprocess.Popen([ray_cli, "start", "--address", address, "--num-cpus", "1", "--node-ip-address",
                               "127.0.0.3", "--block"], env=env, start_new_session=True, stdout=null, stderr=null)
    time.sleep(15)
    return address, [worker, head]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    import signal

    for proc in procs:  # each `ray start --block` and what it started: its own process group, nothing else
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=20)
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=("screen", "exact", "tiers", "waves", "all"))
    ap.add_argument("--spec", action="store_true", help="the speculative grid (module docstring)")
    ap.add_argument("--simulate", default="8", help="tiers: near points simulated (a count or 'all')")
    ap.add_argument("--workers", type=int, default=1, help="tiers: processes for the simulations")
    ap.add_argument("--points", type=int, default=40, help="waves: near points simulated")
    ap.add_argument("--ray", default=None)
    ap.add_argument("--small", action="store_true", help="a 4,608-point grid (a quick check of the script)")
    ap.add_argument("--exact-sample", type=int, default=200)
    ap.add_argument("--front", action="store_true", help="tiers: the near set holds the fronts' candidates")
    a = ap.parse_args()
    global SPEC
    SPEC = a.spec
    more = [*(["--spec"] if a.spec else []), "--simulate", a.simulate, "--workers", str(a.workers)]
    if a.ray == "cluster" and a.part in ("tiers", "all"):
        address, procs = _loopback_cluster()
        try:
            subprocess.run([sys.executable, __file__, "--part", a.part, "--ray", address,
                            *(["--small"] if a.small else []), *(["--front"] if a.front else []), *more], check=True,
                           env={**os.environ, **QUIET_RAY})
        finally:
            _stop(procs)
        return
    if a.part == "all":
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for part in ("screen", "exact", "tiers"):
            cmd = [sys.executable, __file__, "--part", part, "--exact-sample", str(a.exact_sample)]
            cmd += ["--small"] if a.small else []
            cmd += ["--ray", a.ray] if a.ray and part == "tiers" else []
            cmd += ["--front"] if a.front and part == "tiers" else []
            subprocess.run([*cmd, *more], check=True)
        return
    if a.part == "screen":
        res: dict[str, object] = part_screen(a.small)  # type: ignore[assignment]
    elif a.part == "exact":
        res = part_exact(a.small, a.exact_sample)  # type: ignore[assignment]
    elif a.part == "waves":
        res = part_waves(a.small, a.points)
    else:
        sim = None if a.simulate == "all" else int(a.simulate)
        res = part_tiers(a.small, a.ray, a.front, sim, a.workers)
    print(json.dumps({"part": a.part, **res}, indent=None, default=float))


if __name__ == "__main__":
    main()
