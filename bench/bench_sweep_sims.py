"""The simulated tier of a grid sweep (issue 30 items 4-5): CPU seconds per simulated near point, the top 1 % of a
screened grid simulated on 2 cores, and the identity checks that go with a speed-up.

Parts (each prints one JSON document):
  jobs      the near points of bench_sweep_grid's 10⁶-point grid (qwen3-30b-a3b, 8 × h100_sxm, SLA TTFT ≤ 2 s,
            TPOT ≤ 50 ms), as (scenario, concurrency) pairs in simulation order, pickled to bench/out/sweep/jobs.pkl
            (each one what planner.sweep_sims runs: a closed loop of 4·c requests, seed 0)
  points    `--points N` of those (seeded choice; `--first M`: among the first M in simulation order, e.g. 10,000 =
            the grid's top 1 %) simulated one at a time in this process: CPU seconds each (mean,
            median, max, by concurrency), the projection for 10⁴ points on 2 cores, and a sha256 of the sweep's
            fields (requests, TTFT/TPOT mean and p99, output tok/s) of every run
  top       planner.sweep_grid.grid_sweep on a grid of `--grid N` points (the 10⁶ grid's layouts, quantisations and
            concurrencies with fewer lengths) with `--simulate N` (default 1 % of the grid) near points simulated in
            `--workers W` processes: wall and CPU seconds by stage, CPU per run, and a sha256 of the document
  identity  sha256 of `servescope simulate ... --json` on a set of commands (closed loop, Poisson with drawn
            lengths, a 300-request replay, SGLang/TRT-LLM, Kimi-K2.5 with preemptions, prefix hit rate, shared
            prefix, KV offload, burst, attention-DP, a measured decode level, an MoE with EP), of a grid sweep
            with every near point simulated, and of the full SimResult (every array) of `--points N` sweep jobs;
            written to `--out FILE` to compare a tree before and after a change (`--against FILE`)
  replay    the library's 300- and 10,000-request replays (bench_simulate's cases): best process CPU seconds

    python bench/bench_sweep_sims.py jobs
    python bench/bench_sweep_sims.py points --points 40
    python bench/bench_sweep_sims.py top --grid 100000 --workers 2
    python bench/bench_sweep_sims.py identity --out bench/out/sweep/before.json [--against bench/out/sweep/x.json]
What it does not: assert anything or run in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "sweep"
JOBS = OUT / "jobs.pkl"
sys.path.insert(0, str(ROOT / "bench"))


def _cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def part_jobs() -> dict[str, object]:
    import bench_sweep_grid as bg

    from servescope.errors import ServescopeError
    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep

    rec: list[tuple[object, int]] = []

    def run(sc: object, c: int) -> object:
        rec.append((sc, c))
        raise ServescopeError("collected")

    t = time.perf_counter()
    gs = grid_sweep(bg._base(), bg._grid(False), Sla(bg.SLA_TTFT_S, bg.SLA_TPOT_S), simulate_max=None, run=run)
    OUT.mkdir(parents=True, exist_ok=True)
    JOBS.write_bytes(pickle.dumps(rec))
    return {"near": len(gs.points), "runs": gs.runs, "screened": gs.screened, "wall_s": time.perf_counter() - t}


def _picks(n: int, first: int | None = None) -> list[tuple[object, int]]:
    """n of the near points (seeded), among the first `first` in simulation order (None: all)."""
    import numpy as np

    if not JOBS.exists():
        part_jobs()
    rec = pickle.loads(JOBS.read_bytes())[:first]
    idx = sorted(np.random.default_rng(0).choice(len(rec), size=min(n, len(rec)), replace=False).tolist())
    return [rec[i] for i in idx]


def part_points(n: int, repeat: int = 1, first: int | None = None) -> dict[str, object]:
    from servescope.planner.sweep_sims import Job, SimTask, sim_requests

    picks = _picks(n, first)
    task = SimTask(tuple(Job(sc, c, sim_requests(c), "") for sc, c in picks), None)  # type: ignore[arg-type]
    task.one(task.jobs[0])  # imports and first-call set-up out of the timings
    secs, by_c, h = [], {}, hashlib.sha256()
    for job in task.jobs:
        dt = float("inf")
        for _ in range(repeat):  # the least CPU time of `repeat` runs (a shared machine's noise inflates, never deflates)
            t = time.process_time()
            out = task.one(job)
            dt = min(dt, time.process_time() - t)
        secs.append(dt)
        by_c.setdefault(job.concurrency, []).append(dt)
        h.update(repr(out).encode())  # a Simulated (a frozen dataclass: its floats' repr) or a note
    mean = statistics.fmean(secs)
    return {"points": len(secs), "cpu_s_mean": mean, "cpu_s_median": statistics.median(secs), "cpu_s_max": max(secs),
            "cpu_s_by_concurrency": {c: round(statistics.fmean(v), 4) for c, v in sorted(by_c.items())},
            "projected_10k_on_2_cores_s": mean * 10_000 / 2, "sha256": h.hexdigest(), "among_first": first,
            "load_average": os.getloadavg()[0]}


def part_top(grid_points: int, workers: int, simulate: int | None = None) -> dict[str, object]:
    """`simulate` near points simulated (None: 1 % of the grid, the issue's "top 1 %"), the workloads' optima
    first (grid_sweep's order)."""
    import bench_sweep_grid as bg
    import numpy as np

    from servescope.planner.screen import Grid
    from servescope.planner.sweep import Sla
    from servescope.planner.sweep_grid import grid_sweep
    from servescope.report.sweep_grid_doc import grid_document

    full = bg._grid(False)
    n_len = max(2, round((grid_points / (len(full.layouts) * 2 * len(full.concurrency))) ** 0.5))
    isl = tuple(int(x) for x in np.unique(np.geomspace(128, 32768, n_len).round()))
    osl = tuple(int(x) for x in np.unique(np.geomspace(64, 8192, n_len).round()))
    grid = Grid(full.n_gpus, True, full.concurrency, isl, osl, full.quants, full.specs)
    stages = bg._stage_timer()
    t, cpu = time.perf_counter(), _cpu_s()
    top = grid.size // 100 if simulate is None else simulate
    gs = grid_sweep(bg._base(), grid, Sla(bg.SLA_TTFT_S, bg.SLA_TPOT_S), simulate_max=top, workers=workers)
    wall, cpu = time.perf_counter() - t, _cpu_s() - cpu
    doc = json.dumps(grid_document(gs), sort_keys=True).encode()
    return {"grid": grid.size, "screened": gs.screened, "near": len(gs.points), "simulated": gs.simulated,
            "runs": gs.runs, "simulated_share": gs.simulated / gs.screened, "workers": workers, "wall_s": wall,
            "cpu_s": cpu, "timings_s": dict(stages), "cpu_s_per_run": stages.get("_simulate:cpu", 0.0) / max(gs.runs, 1), "sha256": hashlib.sha256(doc).hexdigest(),
            "load_average": os.getloadavg()[0]}


def _commands(tmp: Path) -> dict[str, list[str]]:
    import bench_simulate as bs

    replay = bs._replay_file(tmp)
    small = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm"]
    kimi = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]
    sgl = ROOT / "tests/data/bench_serve/datacrunch_h200_sglang_llama_3_3_70b_online_output.jsonl"
    sim = ["simulate"]
    return {
        "closed": [*sim, *small, "--concurrency", "16", "--num-prompts", "300"],
        "poisson_drawn": [*sim, *small, "--arrival", "poisson:8", "--num-prompts", "300", "--range-ratio", "0.3"],
        "replay300": [*sim, *small, "--replay", str(replay), "--concurrency", "32"],
        "compare_sglang_70b": [*sim, "--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "8", "--backend",
                               "sglang", "--compare", str(sgl)],
        "sglang": [*sim, *small, "--backend", "sglang", "--concurrency", "64", "--num-prompts", "400"],
        "trtllm": [*sim, *small, "--backend", "trtllm", "--concurrency", "64", "--num-prompts", "400"],
        "kimi_preempt": [*sim, *kimi, "--concurrency", "256", "--num-prompts", "600", "--isl", "1024", "--osl",
                         "1024"],
        "prefix_hit": [*sim, *small, "--concurrency", "32", "--num-prompts", "300", "--prefix-hit-rate", "0.5"],
        "shared_prefix": [*sim, *small, "--concurrency", "32", "--num-prompts", "300", "--workload",
                          "shared-prefix:512"],
        "kv_offload": [*sim, *kimi, "--concurrency", "256", "--num-prompts", "400", "--kv-offload", "cpu:200"],
        "burst": [*sim, *small, "--arrival", "burst:200"],
        "attention_dp": [*sim, "--model", "deepseek-v3", "--gpu", "h200", "--dp", "8", "--ep", "8",
                         "--concurrency", "128", "--num-prompts", "300"],
        "measured_level": [*sim, *small, "--concurrency", "8", "--num-prompts", "100", "--measured", "tpot=9ms@c4"],
        "moe_ep": [*sim, "--model", "qwen3-30b-a3b", "--gpu", "h100_sxm", "--tp", "2", "--dp", "4", "--ep", "8",
                   "--concurrency", "512", "--num-prompts", "2048", "--isl", "300", "--osl", "2000"],
        "long_mixed": [*sim, *small, "--arrival", "poisson:20", "--num-prompts", "500", "--isl", "8000", "--osl",
                       "300", "--range-ratio", "0.1"],
        "sweep_grid_all": ["sweep", "--model", "qwen3-30b-a3b", "--gpu", "h100_sxm", "--gpus", "8", "--isls",
                           "128,2048,16384", "--osls", "64,1024,4096", "--quants", "base,fp8", "--concurrency",
                           "1,16,128,512", "--ttft-max", "2000", "--tpot-max", "50", "--simulate-max", "all"],
        "sweep_grid_workers": ["sweep", "--model", "qwen3-30b-a3b", "--gpu", "h100_sxm", "--gpus", "8", "--isls",
                               "256,4096", "--osls", "128,2048", "--concurrency", "4,64,1024", "--tpot-max", "50",
                               "--simulate-max", "all", "--workers", "2"],
    }


def _result_digest(res: object) -> str:
    """sha256 of a SimResult: every field's repr, the per-request sample arrays' bytes."""
    from dataclasses import fields

    h = hashlib.sha256()
    for f in fields(res):  # type: ignore[arg-type]
        v = getattr(res, f.name)
        if f.name == "samples":
            for k in sorted(v):
                h.update(k.encode() + v[k].tobytes())
        else:
            h.update(f"{f.name}={v!r}".encode())
    return h.hexdigest()


def part_identity(n: int) -> dict[str, object]:
    from servescope.simulate import simulate

    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in _commands(Path(tmp)).items():
            r = subprocess.run([sys.executable, "-m", "servescope", *args, "--json"], capture_output=True,
                               cwd=tmp)
            text = r.stdout.replace(tmp.encode(), b"TMP")
            out[name] = {"rc": r.returncode, "sha256": hashlib.sha256(text).hexdigest(), "bytes": len(text)}
            if r.returncode:
                out[name]["stderr"] = r.stderr.decode()[-300:]
    lib = hashlib.sha256()
    for sc, c in _picks(n):
        lib.update(_result_digest(simulate(sc, "closed", c, 4 * c)).encode())  # type: ignore[arg-type]
    out["library_sweep_jobs"] = {"points": n, "sha256": lib.hexdigest()}
    return out


def part_replay() -> dict[str, object]:
    import bench_simulate as bs

    from servescope.perfmodel import Scenario
    from servescope.simulate import replay_workload, simulate_workload

    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm")
    out: dict[str, object] = {}
    for name, (n, rate, seed, cap, reps) in {"replay300": (300, 10, 1, 32, 7),
                                            "replay10k": (10_000, 50, 2, 256, 3)}.items():
        send, isl, osl = bs._requests(n, rate, seed)

        def one(send: object = send, isl: object = isl, osl: object = osl, cap: int = cap) -> None:
            simulate_workload(sc, replay_workload(send, isl, osl, cap))  # type: ignore[arg-type]

        one()
        out[name] = min(_timed(one) for _ in range(reps))
    out["load_average"] = os.getloadavg()[0]
    return out


def _timed(fn: object) -> float:
    t = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("jobs", "points", "top", "identity", "replay"))
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--grid", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=1, help="points: runs of each point, the least CPU time kept")
    ap.add_argument("--first", type=int, default=None, help="points: drawn among the first N in simulation order")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--simulate", type=int, default=None, help="top: near points simulated (default: 1 %% of the grid)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--against", type=Path, default=None, help="identity: a document of an earlier run to compare")
    a = ap.parse_args()
    if a.part == "jobs":
        doc = part_jobs()
    elif a.part == "points":
        doc = part_points(a.points, a.repeat, a.first)
    elif a.part == "top":
        doc = part_top(a.grid, a.workers, a.simulate)
    elif a.part == "replay":
        doc = part_replay()
    else:
        doc = part_identity(a.points)
        if a.against is not None:
            old = json.loads(a.against.read_text())
            doc["differs"] = sorted(k for k in doc if k in old and old[k] != doc[k])
    text = json.dumps(doc, indent=1, default=str)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
