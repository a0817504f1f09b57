"""Speed of `servescope simulate` next to the closed form, on one core.

Usage: .venv/bin/python bench/bench_simulate.py
       .venv/bin/python bench/bench_simulate.py --against REV [--repeat N]   (issue 30.5: this tree against REV)
The issue's target case: a closed loop of 1,000 requests at concurrency 256, ISL/OSL 1024/1024, vLLM / SGLang /
TRT-LLM defaults, on three scenarios (a dense 8B with KV to spare, a dense 70B on TP=4, and Kimi-K2.5 INT4 on
8× RTX PRO 6000 whose KV cache holds ~116 such sequences, so it preempts). Side by side in the same process:
the closed form (`predict` at the same concurrency, the fast path for sweeps). Times are the best of 3 repeats,
wall clock and process CPU time (the CPU time is what one core spends; the wall clock on a shared machine is
inflated by other processes); peak RSS of the process after all runs. Prints a table to paste into
bench/RESULTS.md "## Simulate".

--against REV [--repeat N] (issue 30.5): the issue's speed cases (a 300-request replay and a 300-request closed
loop in the library, 10,000 requests replayed, and the 300-request replay as a command) timed for this tree and for
REV's src/ (`git archive`), alternated in fresh processes: the library cases' best process CPU time of each, the
commands' wall clock (command1 = one request: the command's fixed cost) run N times each side (default 9), one run of
each side in turn, their median and min; prints the ratios (of the medians for commands).
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.environ.get("BENCH_SRC") or str(Path(__file__).resolve().parents[1] / "src"))

from servescope.perfmodel import Scenario, predict  # noqa: E402
from servescope.simulate import simulate  # noqa: E402

CASES = {
    "llama-3.1-8b h100 tp1": dict(model="llama-3.1-8b", gpu="h100_sxm"),
    "llama-3.1-70b h100 tp4": dict(model="llama-3.1-70b", gpu="h100_sxm", tp=4),
    "kimi-k2.5 rtx_pro tp8 int4": dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16"),
}


def _best(fn: Callable[[], object], repeats: int = 3) -> tuple[float, float, object]:
    wall, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu, out


SPEED_CASES = ("replay300", "closed300", "replay10k", "command300", "command1")


def _requests(n: int, rate: float, seed: int) -> tuple[object, object, object]:
    """Poisson sends at `rate` req/s, prompts uniform in [50, 3000), outputs in [10, 600) tokens (seeded)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1 / rate, n)), rng.integers(50, 3000, n), rng.integers(10, 600, n)


def _worker(case: str, repeats: int) -> None:
    """One speed case in this process (sys.path set by the caller): prints the best CPU seconds."""
    from servescope.simulate import replay_workload, simulate_workload

    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm")
    reqs = {"replay300": (_requests(300, 10, 1), 32), "replay10k": (_requests(10_000, 50, 2), 256)}
    if case == "closed300":
        fn: Callable[[], object] = lambda: simulate(sc, "closed", 16, 300)  # noqa: E731
    else:
        (send, isl, osl), cap = reqs[case]
        fn = lambda: simulate_workload(sc, replay_workload(send, isl, osl, cap))  # noqa: E731
    fn()
    print(_best(fn, repeats)[1])


def _replay_file(folder: Path) -> Path:
    send, isl, osl = _requests(300, 10, 1)
    path = folder / "replay300.csv"
    lines = [f"{s:.6f},{i},{o}" for s, i, o in zip(send.tolist(), isl.tolist(), osl.tolist(), strict=True)]  # type: ignore[attr-defined]
    path.write_text("arrival_s,input_len,output_len\n" + "\n".join(lines) + "\n")
    return path


def _env(src: Path) -> dict[str, str]:
    """The environment of a side: its src/ first on the path, bytecode used (the caller compiled it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return dict(env, PYTHONPATH=str(src), BENCH_SRC=str(src))


def _command_wall(src: Path, case: str, replay: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one `servescope simulate ... --json` run (command300: the replay;
    command1: one request, the command's fixed cost: imports, scenario, set-up). The CPU time is what a busy
    machine inflates least."""
    what = ["--replay", str(replay), "--concurrency", "32"] if case == "command300" else [
        "--concurrency", "1", "--num-prompts", "1"]
    cmd = [sys.executable, "-c", "import sys; from servescope.cli import run; sys.argv[0] = 'servescope'; run()",
           "simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", *what, "--json"]
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, env=_env(src), check=True, capture_output=True)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def _time_side(src: Path, case: str, replay: Path) -> float:
    env = _env(src)
    reps = "1" if case == "replay10k" else "5"
    out = subprocess.run([sys.executable, __file__, "--worker", case, reps], env=env, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def against(rev: str, repeat: int = 9) -> None:
    """This tree against git revision `rev`, alternated: library cases two rounds, best of each side; commands
    `repeat` runs each side, one of each in turn, median (and min)."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        tar = subprocess.run(["git", "-C", str(root), "archive", rev, "src"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=tar, check=True)
        replay = _replay_file(Path(tmp))
        for src in (base / "src", root / "src"):  # both sides start from bytecode (PYTHONDONTWRITEBYTECODE may be set)
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, capture_output=True)
        print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"REV = {rev}")
        print("| case | REV s | this tree s | speed-up |")
        print("|---|---:|---:|---:|")
        for case in SPEED_CASES:
            if case.startswith("command"):
                runs: dict[Path, list[tuple[float, float]]] = {base / "src": [], root / "src": []}
                for _ in range(repeat):
                    for src, side in runs.items():
                        side.append(_command_wall(src, case, replay))
                (b, bs, bc), (a, as_, ac) = ((statistics.median(r[0] for r in side), min(r[0] for r in side),
                                              statistics.median(r[1] for r in side)) for side in runs.values())
                print(f"| {case}: wall, median of {repeat} (min) | {b:.3f} ({bs:.3f}) | {a:.3f} ({as_:.3f}) "
                      f"| {b / a:.2f}x |")
                print(f"| {case}: CPU user+sys, median of {repeat} | {bc:.3f} | {ac:.3f} | {bc / ac:.2f}x |")
                continue
            before, after = float("inf"), float("inf")
            for _ in range(2):
                before = min(before, _time_side(base / "src", case, replay))
                after = min(after, _time_side(root / "src", case, replay))
            print(f"| {case} | {before:.3f} | {after:.3f} | {before / after:.2f}x |")
    print("(library cases: best process CPU time; commands: wall clock of the whole command, alternated runs)")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--against":
        against(sys.argv[2], int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--repeat" else 9)
        return
    if len(sys.argv) > 3 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], int(sys.argv[3]))
        return
    print(f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| scenario | backend | simulate wall s | simulate CPU s | requests | closed form wall ms "
          "| sim tok/s | closed-form tok/s | preemptions |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, kw in CASES.items():
        for backend in ("vllm", "sglang", "trtllm"):
            sc = Scenario.build(**kw, isl=1024, osl=1024, backend=backend)  # type: ignore[arg-type]
            w, c, res = _best(lambda sc=sc: simulate(sc, "closed", 256, 1000))
            wc, _, pts = _best(lambda sc=sc: predict(sc, [256]))
            r = res  # type: ignore[assignment]
            print(f"| {name} | {backend} | {w:.3f} | {c:.3f} | 1000 | {wc * 1e3:.2f} | {r.output_tok_s:,.0f} "  # type: ignore[attr-defined]
                  f"| {pts[0].output_tok_s:,.0f} | {r.queueing.preemptions} |")  # type: ignore[index,attr-defined]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of the process: {rss:.0f} MB")


if __name__ == "__main__":
    main()
