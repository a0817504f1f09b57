"""Calibration from a benchmark result file (issue 17 target: ≤ 0.5 s): reading the file into figures
(calibrate.inputs) and fitting the deployment (calibrate.figure_fit), in the library, and the whole
`servescope model --measured FILE` / `plan --measured FILE` commands in fresh processes.

Files: the real SGLang bench_serving JSONL of Llama-3.3-70B on 4× H200 (tests/data/bench_serve, 7 runs), and a
detailed vLLM --save-result JSON of 1,000 requests (per-request arrays; written to a temporary folder, its
summary numbers made up, shaped like vllm/benchmarks/serve.py writes them), at four concurrencies for the vLLM one.
What it does not: assert (it prints medians of --repeat runs).

    python bench/bench_measured.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servescope.calibrate.figure_fit import fit_figures
from servescope.calibrate.inputs import read_measured
from servescope.perfmodel import Scenario

ROOT = Path(__file__).parents[1]
SGLANG = ROOT / "tests" / "data" / "bench_serve" / "datacrunch_h200_sglang_llama_3_3_70b_online_output.jsonl"


def vllm_detailed(path: Path, n: int = 1000, concurrency: int = 16) -> Path:
    """A detailed vLLM result of n requests at ISL 1024 / OSL 128 (summary numbers made up)."""
    d = {"date": "20261202-120000", "endpoint_type": "openai", "dataset_name": "random", "num_prompts": n,
         "request_rate": "inf", "max_concurrency": concurrency, "duration": 100.0, "completed": n,
         "total_input_tokens": 1024 * n, "total_output_tokens": 128 * n, "request_throughput": n / 100.0,
         "output_throughput": 128 * n / 100.0, "mean_ttft_ms": 60.0, "median_ttft_ms": 55.0, "p99_ttft_ms": 150.0,
         "mean_tpot_ms": 11.0, "median_tpot_ms": 10.8, "p99_tpot_ms": 14.0, "mean_itl_ms": 11.0,
         "median_itl_ms": 10.5, "p99_itl_ms": 20.0, "input_lens": [1024] * n, "output_lens": [128] * n,
         "ttfts": [0.06] * n, "itls": [[0.011] * 127 for _ in range(n)], "start_times": [i * 0.1 for i in range(n)],
         "generated_texts": ["x" * 400] * n}
    path.write_text(json.dumps(d))
    return path


def library(label: str, path: Path, sc: Scenario, repeat: int) -> None:
    reads, fits = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        inputs = read_measured([str(path)])
        t1 = time.perf_counter()
        fit = fit_figures(sc, inputs.figures)
        t2 = time.perf_counter()
        reads.append(t1 - t0)
        fits.append(t2 - t1)
    print(f"{label}: {path.stat().st_size / 1e6:.2f} MB, {len(inputs.figures)} figures; read "
          f"{statistics.median(reads) * 1e3:.1f} ms, fit {statistics.median(fits) * 1e3:.1f} ms "
          f"(median of {repeat}); {fit.status()}")


def command(label: str, args: list[str], repeat: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "servescope", *args, "--json"], check=True,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    print(f"{label}: whole command on one core {statistics.median(walls):.2f} s (median of {repeat}; "
          f"{', '.join(f'{w:.2f}' for w in walls)})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    llama = Scenario.build("llama-3.1-70b", "h200", tp=4, isl=509, osl=534, backend="sglang")
    library("SGLang JSONL (7 runs)", SGLANG, llama, a.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        vllm = vllm_detailed(Path(tmp) / "vllm-detailed.json")
        small = Scenario.build("llama-3.1-8b", "h100", tp=1, isl=1024, osl=128)
        library("vLLM detailed JSON (1,000 requests)", vllm, small, a.repeat)
        base = ["--model", "llama-3.1-8b", "--gpu", "h100", "--isl", "1024", "--osl", "128"]
        command("model --measured vLLM file", ["model", *base, "--concurrency", "1,16,64", "--measured", str(vllm)],
                a.repeat)
        command("model (no --measured)", ["model", *base, "--concurrency", "1,16,64"], a.repeat)
        command("plan --measured vLLM file", ["plan", *base, "--concurrency", "16", "--measured", str(vllm)], a.repeat)


if __name__ == "__main__":
    main()
