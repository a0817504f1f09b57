"""Side-by-side benchmark of `calibrate`: the implementation of a baseline commit against the working tree, in one
process on the same breakdowns, with an exact comparison of every output number; optionally the end-to-end
`servescope report TRACE --model …` of both versions in fresh processes under GNU time.

What it does: loads the baseline's calibrate.py with `git show REV:src/servescope/calibrate.py` (default 8a6dbf5,
the last commit before the speed-up), builds breakdowns of the test traces, the tiled big trace (bench/out, built by
make_big_trace.py) and step mixes made from them (the real step re-labelled to other sizes), calibrates each with
both versions and prints wall ms and whether efficiencies, knobs, per-class and per-step predictions, residuals,
step errors and warnings are identical (repr of every float). `--e2e N`: extracts the baseline's src/ with
`git archive` into a temporary folder and alternates N times: report with a scenario, before (PYTHONPATH) and
after, and `trace --json`; prints medians (wall s, peak RSS MB) and whether the two HTML files are byte-identical.
What it does not: run in CI, or assert (it reports, whatever it finds).

    python bench/bench_calibrate.py [--rev 8a6dbf5] [--e2e 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import servescope.calibrate as new
from servescope.analysis.breakdown import TraceBreakdown, breakdown
from servescope.perfmodel import Efficiency, Scenario
from servescope.trace import load_trace

ROOT = Path(__file__).parents[1]
BIG = ROOT / "bench" / "out" / "big_trace.json"
TL = ROOT / "tests" / "data" / "traces" / "tracelens"
SGLANG = Path("/work/shared/traces/tracelens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz")
GPT_OSS_20B = ROOT / "tests" / "data" / "planner" / "openai--gpt-oss-20b_config.json"
SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]


def _old_module(rev: str) -> ModuleType:
    code = subprocess.run(["git", "show", f"{rev}:src/servescope/calibrate.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_calibrate.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("old_calibrate", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["old_calibrate"] = mod
    spec.loader.exec_module(mod)
    return mod


def _cases() -> list[tuple[str, TraceBreakdown, Scenario, dict[str, Any]]]:
    b200 = Scenario.build("gpt-oss-120b", "b200", tp=8, quant="native", efficiency=Efficiency())
    fitted = Scenario.build("gpt-oss-120b", "b200", tp=8, quant="native")
    mi = Scenario.build(str(GPT_OSS_20B), "mi300x", tp=1, quant="native", isl=1000, osl=1443, efficiency=Efficiency())
    pb = breakdown(load_trace(TL / "b200" / "eager_trace.json.gz"))
    db = breakdown(load_trace(TL / "inference" / "vllm_decode_full" / "graph_execution.json.gz"))
    p0, d0 = pb.steps[0], db.steps[0]
    prefills = replace(pb, steps=tuple(replace(p0, index=i, tokens=t, gpu_span_us=p0.gpu_span_us * f) for i, (t, f)
                                       in enumerate([(888, 1.0), (512, .8), (2048, 1.7), (888, 1.05), (128, .5),
                                                     (4096, 3.0)])))
    decodes = replace(db, steps=tuple(replace(d0, index=i, batch_size=b, tokens=b, gpu_span_us=d0.gpu_span_us * f)
                                      for i, (b, f) in enumerate([(32, 1.0), (16, .7), (64, 1.6), (32, 1.1), (8, .5),
                                                                  (32, .95)])))
    both = replace(pb, steps=(p0, replace(p0, index=1, tokens=256, gpu_span_us=p0.gpu_span_us * .6),
                              replace(p0, index=2, kind="decode", tokens=64, batch_size=64,
                                      gpu_span_us=p0.gpu_span_us * .3)))
    cases = [("B200 eager prefill", pb, b200, {}), ("B200 eager prefill, fitted prior", pb, fitted, {}),
             ("MI300X graph decode, context given", db, mi, {"context_len": 55086 / 32}),
             ("MI300X graph decode, context assumed", db, mi, {}),
             ("B200 step as 6 prefill sizes", prefills, b200, {}),
             ("B200 step as 6 prefill sizes, fitted prior", prefills, fitted, {}),
             ("MI300X step as 6 decode batches", decodes, mi, {"context_len": 1500.0}),
             ("B200 step as 2 prefills + 1 decode", both, b200, {})]
    if SGLANG.exists():
        cases.append(("SGLang Qwen3-8B EXTEND", breakdown(load_trace(SGLANG)),
                      Scenario.build("qwen3-8b", "h100_sxm", tp=1), {}))
    if BIG.exists():
        cases.append(("tiled big trace (10 steps)", breakdown(load_trace(BIG)),
                      Scenario.build("gpt-oss-120b", "b200_sxm", tp=8), {}))
    return cases


def _numbers(c: object) -> str:
    return repr((dataclasses.asdict(c.efficiency), c.knobs, c.measured_s, c.predicted_s,  # type: ignore[attr-defined]
                 c.residuals, c.step_errors, c.warnings, c.cuda_graphs,  # type: ignore[attr-defined]
                 [(s.index, s.measured_s, s.predicted_s) for s in c.steps]))  # type: ignore[attr-defined]


def in_process(rev: str) -> None:
    old = _old_module(rev)
    print(f"| input | steps (distinct shapes) | {rev} ms | now ms | identical |\n|---|---|---|---|---|")
    for name, bd, sc, kw in _cases():
        t = time.perf_counter()
        a = old.calibrate(bd, sc, **kw)
        t_old = time.perf_counter() - t
        t = time.perf_counter()
        b = new.calibrate(bd, sc, **kw)
        t_new = time.perf_counter() - t
        shapes = len({(s.kind, s.tokens, s.batch) for s in b.steps})
        print(f"| {name} | {len(b.steps)} ({shapes}) | {t_old * 1e3:,.0f} | {t_new * 1e3:,.0f} | "
              f"{'yes' if _numbers(a) == _numbers(b) else 'NO'} |")


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=True, env=env)
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()
    return float(wall_s), float(rss_kib) * 1024 / 1e6


def end_to_end(rev: str, repeat: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    report = [sys.executable, "-m", "servescope", "report", str(BIG), *SCENARIO, "-o"]
    runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": [], "trace --json": []}
    for _ in range(repeat):
        runs["before"].append(_timed([*report, str(tmp / "before.html")], {**base, "PYTHONPATH": str(tmp / "src")}))
        runs["after"].append(_timed([*report, str(tmp / "after.html")], base))
        runs["trace --json"].append(_timed([sys.executable, "-m", "servescope", "trace", "--json", str(BIG)], base))
    print(f"\n| command (big trace) | wall s (median of {repeat}) | peak RSS MB |\n|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {statistics.median(r[0] for r in rs):.2f} | {statistics.median(r[1] for r in rs):.0f} |")
    same = (tmp / "before.html").read_bytes() == (tmp / "after.html").read_bytes()
    print(f"\nHTML reports byte-identical: {same}; raw runs: {runs}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rev", default="8a6dbf5", help="baseline commit")
    parser.add_argument("--e2e", type=int, default=0, help="also time the report end to end, N alternations")
    args = parser.parse_args()
    in_process(args.rev)
    if args.e2e:
        end_to_end(args.rev, args.e2e)


if __name__ == "__main__":
    main()
