"""Time budgets that used to be test assertions (issue 30 item 6), timed here instead of asserted in tests.

What it does: runs each case the default suite now checks by its bounded work (tests/trace/test_trace_lean.py,
tests/trace/test_trace_budgets.py, tests/simulate/test_simulate_budget.py, tests/fuzz/test_fuzz_args.py), best of
R runs in this process, and prints a Markdown table: seconds, the limit the test used to assert, and their ratio
(> 1: over the old budget). Inputs are built as the tests build them (bombs from repeated gzip members, never held).
What it does not do: assert anything, or run in CI: on a loaded machine the seconds grow, the work does not.

    python bench/bench_budgets.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "fuzz")]

from fuzz_inputs import check_cli, repeated_members  # noqa: E402
from servescope.analysis.classify import classify_name  # noqa: E402
from servescope.errors import NotATrace, ScenarioError  # noqa: E402
from servescope.perfmodel import Scenario  # noqa: E402
from servescope.simulate import simulate, simulate_points  # noqa: E402
from servescope.trace import load_trace  # noqa: E402

EVENT = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"pid":0,"tid":7,"args":{"device":0}}'
KERNEL = '{{"ph":"X","cat":"kernel","name":{name},"ts":{ts},"dur":2,"pid":0,"tid":7,"args":{{"device":0}}}}'
MB = 1 << 20
SIM = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--isl", "256", "--osl", "64"]
BIG = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]


def _refused(fn: Callable[[], object], error: type[Exception]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except error:
            return
        raise SystemExit(f"{fn}: not refused")
    return run


def _cli(args: list[str]) -> Callable[[], None]:
    def run() -> None:
        if (bad := check_cli([*args, "--json"])) is not None:
            raise SystemExit(f"{' '.join(args)}: {bad}")
    return run


def trace_cases(tmp: Path) -> list[tuple[str, float, Callable[[], None]]]:
    last = tmp / "last.json"
    names = ["a", "n" * (16 << 20)]
    last.write_text('{"traceEvents": [' + ",".join(KERNEL.format(name=json.dumps(n), ts=10 * i)
                                                   for i, n in enumerate(names)) + "]}")
    ws_bomb = repeated_members(tmp / "bomb.json.gz", b'{"traceEvents": [' + EVENT, b" " * MB, 4096, b"]}")
    body = (EVENT + b",") * 10_000
    many = repeated_members(tmp / "many.json.gz", b'{"traceEvents": [', body, 2_600_000_000 // len(body),
                            EVENT + b"]}")
    cases = [
        ("classify a 50 MB name", 0.5, lambda: None if classify_name.__wrapped__("y" * 50_000_000 + "_AllReduce")
         else None),
        ("load: 16 MB in the last event", 1.5, lambda: None if load_trace(last) else None),
        ("refuse: 4 GB of whitespace in 4 MB of gzip", 5.0, _refused(lambda: load_trace(ws_bomb), NotATrace)),
        ("refuse: 2.6 GB of one repeated kernel", 5.0, _refused(lambda: load_trace(many), NotATrace)),
    ]
    ws = b" " * (8 * MB)
    for where, body_ws in {"after": EVENT + b"," + EVENT + ws, "between": EVENT + b"," + ws + EVENT,
                           "inside": EVENT + b"," + EVENT[:-1] + b', "x":' + ws + b"1}"}.items():
        path = tmp / f"ws_{where}.json"
        path.write_bytes(b'{"traceEvents": [' + body_ws + b"]}")
        cases.append((f"load: 8 MB of whitespace {where} an event", 3.0,
                      lambda p=path: None if load_trace(p) else None))  # type: ignore[misc]
    return cases


def simulate_cases() -> list[tuple[str, float, Callable[[], None]]]:
    sc = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=256, osl=64)
    cases: list[tuple[str, float, Callable[[], None]]] = [
        ("refuse: simulate burst:1000000000", 1.0, _refused(lambda: simulate(sc, "burst:1000000000"), ScenarioError)),
        ("refuse: simulate_points [1, 16, 1000000]", 1.0,
         _refused(lambda: simulate_points(sc.with_(isl=1024, osl=512), [1, 16, 1_000_000]), ScenarioError)),
    ]
    for args in (["simulate", *SIM, "--arrival", "burst:1000000000"],
                 ["simulate", *BIG, "--concurrency", "64", "--num-prompts", "1000000"],
                 ["model", *BIG, "--simulate", "--concurrency", "1,1000000"],
                 ["simulate", *SIM, "--max-num-batched-tokens", "1", "--num-prompts", "100000", "--concurrency", "8"]):
        cases.append(("cli refuses: " + " ".join(args[:1] + args[9 if args[2] == "llama-3.1-8b" else 7:]), 5.0,
                      _cli(args)))
    from test_fuzz_args import SIZE_ARGS
    for args in SIZE_ARGS:
        cases.append(("fuzz: " + " ".join(args[:1] + args[7:]), 10.0, _cli(args)))
    return cases


def first_and_best(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """(seconds of the first run in this process, as a test's single run; the best of `repeat`)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times[0], min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = trace_cases(Path(tmp)) + simulate_cases()
        print(f"| case | first run (s) | best of {args.repeat} (s) | old test limit (s) | first / limit |")
        print("|---|---:|---:|---:|---:|")
        for name, limit, fn in cases:
            first, best = first_and_best(fn, args.repeat)
            print(f"| {name} | {first:.3f} | {best:.3f} | {limit:g} | {first / limit:.2f} |", flush=True)


if __name__ == "__main__":
    main()
