"""`servescope simulate`: a step-level simulation of the engine's scheduler (simulate), optionally next
to measured `vllm bench serve` / `sglang.bench_serving` result files (`--compare FILE`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servescope.cli._app import (
    Output,
    main,
    note,
    one_line_errors,
    output_options,
)
from servescope.cli._measured import measured_figures, measured_fit, measured_option
from servescope.cli._scenario import _scenario, scenario_options
from servescope.cli._simulate_runs import (  # memory_limit: model_cmd too
    MAX_RUN_S,
    memory_limit,
    progress_for,
)

if TYPE_CHECKING:  # the CLI imports no numpy before a command runs (rank workers fork; start-up time)
    import numpy as np

    from servescope.perfmodel.scenario import Scenario


# A run's requests: a million closed-loop requests simulate in minutes; beyond that the arrays alone run out of room.
MAX_PROMPTS = 1_000_000


# the benchmark clients whose --random-range-ratio --range-ratio follows (benchmark vocabulary, not engine names)
RANGE_CONVENTIONS = {
    "sglang": "uniform in [ratio·len, len]: sglang.bench_serving --random-range-ratio",
    "vllm": "uniform in [len·(1−ratio), len·(1+ratio)]: vllm bench serve --random-range-ratio",
}

@main.command()
@scenario_options
@click.option("--arrival", default="closed", show_default=True, help="closed | poisson:RATE (req/s) | burst:N.")
@click.option("--concurrency", type=int, default=None,
              help="In-flight cap of the client (closed loop: required; like --max-concurrency).")
@click.option("--num-prompts", default=1000, show_default=True, type=click.IntRange(min=1, max=MAX_PROMPTS),
              help="Requests in the run.")
@click.option("--lengths", "lengths_file", type=click.Path(path_type=Path), default=None,
              help="File of 'isl,osl' lines (cycled); overrides --isl/--osl.")
@click.option("--range-ratio", default=None, type=float,
              help="Spread of the drawn lengths, in the convention of --range-convention: sglang (default) draws "
                   "uniformly in [ratio·len, len] (1 = fixed; sglang.bench_serving --random-range-ratio); vllm in "
                   "[len·(1−ratio), len·(1+ratio)] (0 = fixed, ratio < 1; vllm bench serve --random-range-ratio).")
@click.option("--range-convention", type=click.Choice(list(RANGE_CONVENTIONS)), default="sglang", show_default=True,
              help="Which benchmark's --random-range-ratio --range-ratio follows (their meanings differ).")
@click.option("--max-num-seqs", type=int, default=None, help="Running sequences per step (engine default).")
@click.option("--max-num-batched-tokens", type=int, default=None, help="Token budget per step (engine default).")
@click.option("--max-model-len", type=int, default=None, help="Context limit (prompt + output), tokens.")
@click.option("--kv-cache-tokens", type=int, default=None,
              help="KV capacity in tokens (the engine's logged 'KV cache size'); default: from the memory model.")
@click.option("--engine-log", "engine_log", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The engine's log (vLLM 'GPU KV cache size: N tokens', SGLang max_total_num_tokens): the KV "
                   "capacity comes from it instead of the memory model (--kv-cache-tokens wins).")
@click.option("--seed", default=0, show_default=True, help="Seed of Poisson gaps and drawn lengths.")
@click.option("--replay", "replay_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Replay measured requests: their send times and lengths, from a detailed vLLM result (--save-result "
                   "--save-detailed) or a CSV/JSONL of arrival_s,input_len,output_len [,ttft_s,tpot_s,e2e_s]; the "
                   "file's measured latencies are shown beside the simulated ones. --concurrency caps in-flight.")
@click.option("--compare", "compare_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Measured vLLM --save-result JSON or SGLang bench_serving JSONL: simulate each run in it "
                   "with its client settings and compare every metric it has. Server settings (max_num_seqs, "
                   "max_num_batched_tokens, max_model_len, kv_cache_tokens) from FILE.server.toml when present; "
                   "flags override it.")
@click.option("--prefix-hit-rate", type=float, default=0.0, show_default=True,
              help="Prefix caching: the share of each prompt found in the KV cache (0–1; whole KV blocks, at most "
                   "all but the last token), e.g. the rate the engine's /metrics shows.")
@click.option("--workload", "workload", default=None,
              help="random (default) | shared-prefix:LEN: every prompt starts with the same LEN tokens, computed "
                   "once and held once in the KV cache (prefix caching on).")
@click.option("--kv-offload", "kv_offload", default=None,
              help="cpu:SIZE (GB; GiB or TB may be written): a host KV tier of SIZE; a request preempted for KV room "
                   "is copied there and back over the GPU's PCIe link (its bandwidth from the GPU spec) instead of "
                   "recomputed; the copies stall their steps. The GPU KV capacity is unchanged.")
@click.option("--metrics", "metrics_file", type=click.Path(path_type=Path), default=None,
              help="A Prometheus text scrape of the engine's /metrics (vLLM vllm:*, SGLang sglang:*; curl "
                   "HOST:PORT/metrics > FILE after the run): its measured TTFT, queue, prefill, decode, ITL and "
                   "E2E (mean, p50/p90/p99 from the histograms) are shown beside the simulated ones. Without "
                   "--concurrency a closed loop runs at the running requests the scrape shows.")
@click.option("--rank-trace", "rank_trace", type=click.Path(exists=True, path_type=Path), default=None,
              help="A trace of this deployment's ranks (a folder of per-rank files): their measured wait for the "
                   "slowest rank at each collective, per step, replaces the model's rank-arrival wait in every step.")
@measured_option
@output_options
@one_line_errors
def simulate(arrival: str, concurrency: int | None, num_prompts: int, lengths_file: Path | None,
             range_ratio: float | None, range_convention: str, max_num_seqs: int | None, max_num_batched_tokens: int | None,
             max_model_len: int | None, kv_cache_tokens: int | None, engine_log: Path | None, seed: int,
             replay_file: Path | None, compare_file: Path | None, prefix_hit_rate: float, workload: str | None,
             kv_offload: str | None, metrics_file: Path | None, rank_trace: Path | None, measured: tuple[str, ...],
             out: Output, **kw: Any) -> None:
    """Simulate the engine's scheduler step by step: TTFT, TPOT, ITL, E2E percentiles and throughput. With
    --measured every decode step runs at the deployment's measured level (the calibrated closed form's TPOT over
    the model's at --concurrency, else at the first measured concurrency)."""
    from servescope.report.titles import scenario_title
    from servescope.simulate.offload import parse_offload
    from servescope.simulate.prefix import check_hit_rate, parse_workload

    offload_bytes = parse_offload(kv_offload)
    shared_prefix = parse_workload(workload)
    check_hit_rate(prefix_hit_rate)
    from servescope.cli._simulate_runs import (
        compare_runs,
        emit_run,
        metrics_concurrency,
        rank_wait,
        read_metrics,
        replay_run,
    )

    sc = _scenario(kw)
    metrics = read_metrics(metrics_file)
    if metrics is not None and concurrency is None and arrival == "closed" and compare_file is None:
        concurrency = metrics_concurrency(metrics)
    if engine_log is not None and kv_cache_tokens is None:
        kv_cache_tokens = _logged_kv(engine_log)
    engine, kv = _engine(sc, compare_file, {"max_num_seqs": max_num_seqs, "max_num_batched_tokens":
                                            max_num_batched_tokens, "max_model_len": max_model_len,
                                            "kv_cache_tokens": kv_cache_tokens})
    requests = _replay_requests(replay_file)
    level = _measured_level(_at_file_lengths(sc, requests, replay_file) if measured else sc, measured, concurrency)
    if level is not None:
        engine = engine.with_(decode_level=level[0])
    engine = engine.with_(rank_wait_s=rank_wait(rank_trace))
    title = scenario_title(sc, backend=True)
    if compare_file is not None:
        compare_runs(sc, engine, compare_file, kv, seed, title, out, metrics)
        return
    if replay_file is not None and requests is not None:
        replay_run(sc, engine, requests, concurrency, kv, title, out, metrics)
        return
    lengths, range_ratio = _lengths(sc, lengths_file, range_ratio, range_convention, num_prompts, seed)
    with progress_for(out.format == "text" or out.path is not None) as progress:
        res = _run(sc, engine, kv, progress, arrival=arrival, concurrency=concurrency, num_prompts=num_prompts,
                   lengths=lengths, range_ratio=range_ratio, seed=seed, prefix_hit_rate=prefix_hit_rate,
                   shared_prefix=shared_prefix, offload_bytes=offload_bytes)
    emit_run(sc, res, level, metrics, title, out)


def _engine(sc: Scenario, compare_file: Path | None, given: dict[str, int | None]) -> tuple[Any, int | None]:
    """The simulated engine (simulate.EngineConfig) and its KV capacity in tokens (None: from the memory model):
    the settings `given` on the command line, else the bench file's sidecar settings (with --compare), else the
    engine's defaults."""
    from servescope.simulate import engine_for

    if compare_file is not None:  # the bench file's sidecar settings, unless given on the command line
        from servescope.cli._simulate_runs import sidecar

        given = {**sidecar(compare_file), **{k: v for k, v in given.items() if v is not None}}
    kv = given.pop("kv_cache_tokens", None)
    return engine_for(sc, **given), kv


def _replay_requests(replay_file: Path | None) -> Any:
    """The measured requests of `--replay` (validation.benchio.read_requests), or None."""
    if replay_file is None:
        return None
    from servescope.validation.benchio import read_requests

    return read_requests(replay_file)


def _lengths(sc: Scenario, lengths_file: Path | None, range_ratio: float | None, range_convention: str,
             num_prompts: int, seed: int) -> tuple[Any, float]:
    """The synthetic run's (isl, osl) lengths (None: drawn by the simulation around --isl/--osl) and the range
    ratio in the simulation's sglang convention: `--lengths` read as given, or the vllm convention's lengths
    drawn here (the simulation then draws nothing: ratio 1)."""
    lengths = None
    if lengths_file is not None:
        from servescope.validation.benchio import read_lengths

        lengths = read_lengths(lengths_file)
    if range_convention == "vllm" and lengths is None:
        lengths = vllm_lengths(num_prompts, sc.isl, sc.osl, range_ratio or 0.0, seed)
    return lengths, 1.0 if range_ratio is None or range_convention == "vllm" else range_ratio


def _run(sc: Scenario, engine: Any, kv: int | None, progress: Callable[[int, int], None] | None, *, arrival: str,
         concurrency: int | None, num_prompts: int, lengths: Any, range_ratio: float, seed: int,
         prefix_hit_rate: float, shared_prefix: int, offload_bytes: float) -> Any:
    """One synthetic simulation run (simulate.simulate), within this run's memory and time limits."""
    from servescope.simulate import simulate as run_simulation

    return run_simulation(sc, arrival, concurrency, num_prompts, lengths, range_ratio, seed, engine,
                          kv, progress, memory_limit(), time_limit_s=MAX_RUN_S, prefix_hit_rate=prefix_hit_rate,
                          shared_prefix_tokens=shared_prefix, kv_offload_bytes=offload_bytes)


def _measured_level(sc: Scenario, values: tuple[str, ...], concurrency: int | None) -> tuple[float, Any] | None:
    """`--measured`: (the decode level the simulation runs at, its document) or None; said in a note."""
    fit = measured_fit(sc, measured_figures(values))
    if fit is None or not fit.calibrated:
        return None
    from servescope.calibrate.measured import decode_level_at
    from servescope.report.measured_doc import measured_document

    c = concurrency or (fit.points[0].concurrency if fit.points else 1)
    level = decode_level_at(sc, fit, c)
    note(f"--measured: every decode step simulated at ×{level:.3g} the model (the calibrated TPOT over the model's "
         f"at concurrency {c}; prefill chunks as modelled)")
    return level, measured_document(fit) | {"decode_level": level, "level_at_concurrency": c}


def _logged_kv(path: Path) -> int | None:
    """The KV capacity an engine log states (None, with a warning on stderr, when it states none)."""
    from servescope.validation.enginelog import read_engine_log

    log = read_engine_log(path)
    for w in log.warnings:  # said after the result (notes): an error stays one line
        note(f"warning: {w}")
    return log.kv_cache_tokens


def vllm_lengths(n: int, isl: int, osl: int, ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n (isl, osl) pairs as `vllm bench serve --random-range-ratio` draws them: uniform integers in
    [floor(len·(1−r)), ceil(len·(1+r))], outputs at least 1, r in [0, 1) (vllm-project/vllm
    vllm/benchmarks/datasets.py RandomDataset.get_sampling_params; 0 = fixed lengths)."""
    import math

    import numpy as np

    from servescope.errors import ScenarioError

    if not 0.0 <= ratio < 1.0:
        raise ScenarioError(f"--range-ratio {ratio} must be in [0, 1) with --range-convention vllm (vllm bench "
                            "serve's RandomDataset refuses others)")
    rng = np.random.default_rng(seed)
    lo_i, hi_i = math.floor(isl * (1 - ratio)), math.ceil(isl * (1 + ratio))
    lo_o, hi_o = max(1, math.floor(osl * (1 - ratio))), max(1, math.ceil(osl * (1 + ratio)))
    return rng.integers(max(1, lo_i), max(1, hi_i) + 1, n), rng.integers(lo_o, hi_o + 1, n)


def _at_file_lengths(sc: Scenario, requests: Any, path: Path | None) -> Scenario:
    """The scenario at a replay file's mean request lengths (rounded), where `--measured` calibrates: the figures
    describe the replayed traffic, not the default ISL/OSL. Unchanged without a file; said in a note."""
    if requests is None or path is None or not len(requests.isl):
        return sc
    isl, osl = max(1, round(float(requests.isl.mean()))), max(1, round(float(requests.osl.mean())))
    if (isl, osl) != (sc.isl, sc.osl):
        note(f"--measured calibrates at {path.name}'s mean lengths, ISL {isl} / OSL {osl} (the scenario has "
             f"{sc.isl} / {sc.osl})")
    return sc.with_(isl=isl, osl=osl)


@main.command()
@scenario_options
@click.option("--gpus", "n_gpus", type=int, default=None, help="GPUs to lay out (default: tp·dp of the options).")
@click.option("--concurrency", default="1,4,16,32,64,128,256", show_default=True,
              help="Comma-separated concurrencies per layout.")
@click.option("--all", "all_points", is_flag=True, help="Show every point, not only the Pareto front.")
@click.option("--ttft-max", type=click.FloatRange(min=0, min_open=True), default=None,
              help="SLA on the mean TTFT, ms: every point screened on the closed form, the passing front simulated.")
@click.option("--tpot-max", type=click.FloatRange(min=0, min_open=True), default=None,
              help="SLA on the mean TPOT, ms (as --ttft-max; either or both).")
@click.option("--isls", default=None, help="Grid sweep (two tiers): comma-separated ISLs (default: --isl).")
@click.option("--osls", default=None, help="Grid sweep: comma-separated OSLs (default: --osl).")
@click.option("--quants", default=None,
              help="Grid sweep: comma-separated weight schemes (base = the options' quantisation, native, fp8, ...).")
@click.option("--max-grid-mib", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Grid sweep: refuse a grid whose screen needs more memory than this (MiB; default 2048).")
@click.option("--spec", "specs", default=None,
              help="Grid sweep: comma-separated speculative settings: off, METHOD:K (mtp:2, eagle3:3; the bundled "
                   "acceptance curves) (default off).")
@click.option("--simulate-max", default=None,
              help="Grid sweep: simulate at most this many near points, the fronts first (default 8; all: every one).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Grid sweep: run the simulations in this many processes (default 1).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None,
              help="Grid sweep: the simulations as Ray tasks; bare --ray starts a local Ray, --ray ADDRESS joins one.")
@measured_option
@output_options
@one_line_errors
def sweep(n_gpus: int | None, concurrency: str, all_points: bool, ttft_max: float | None, tpot_max: float | None,
          measured: tuple[str, ...], out: Output, **kw: Any) -> None:
    """Concurrency × TP/EP/DP layouts of the same GPUs (closed form): the Pareto front of tok/s per GPU
    against tok/s per user. With --measured: calibrated on your figures (measured on the layout of the options;
    its levels carried to the other layouts) and the measured points listed. With --ttft-max/--tpot-max: every
    point screened against the SLA on the closed form, then only the passing points on their Pareto front
    simulated (a closed loop each), with how many were screened, passed and simulated. With --isls, --osls or
    --quants or --spec: a grid sweep in two tiers (layouts × quantisations × speculative settings × ISL × OSL ×
    concurrencies screened from the step
    model at anchors, its error measured, the points within it of the SLA or the front on the full closed form, the
    best of the front simulated; docs/simulate.md §Grid sweeps)."""
    from servescope.cli._scenario import _int_list

    grid_opts = {k: kw.pop(k) for k in ("isls", "osls", "quants", "specs", "max_grid_mib", "simulate_max", "workers",
                                        "ray_address")}
    if any(grid_opts[k] is not None for k in ("isls", "osls", "quants", "specs")):
        from servescope.cli._sweep_grid import grid_command

        grid_command(_scenario(kw), n_gpus, _int_list(concurrency), all_points, ttft_max, tpot_max, measured, out,
                     grid_opts)
        return
    from servescope.planner.sweep import sweep as run_sweep
    from servescope.report.simulate_doc import sweep_document
    from servescope.report.simulate_text import render_sweep
    from servescope.report.titles import scenario_document, scenario_title

    base = _scenario(kw)
    n = n_gpus if n_gpus is not None else kw["tp"] * kw["dp"]
    fit = measured_fit(base, measured_figures(measured))
    concs = _int_list(concurrency)
    calibrated = fit if fit is not None and fit.calibrated else None
    if calibrated is not None:
        concs = sorted({*concs, *(p.concurrency for p in calibrated.points)})  # the curves pass through the points
    sw = run_sweep(base, n, concs, base.model.is_moe, calibrated)
    if ttft_max is not None or tpot_max is not None:
        from servescope.planner.sweep import Sla, screen, simulate_front
        from servescope.units import ms_to_s

        sla = Sla(None if ttft_max is None else ms_to_s(ttft_max), None if tpot_max is None else ms_to_s(tpot_max))
        sw = simulate_front(base, screen(sw, sla))
        if calibrated is not None:  # the screen used the calibrated closed form; the simulation runs the model
            from dataclasses import replace

            sw = replace(sw, notes=(*sw.notes, "simulated on the uncalibrated model: --measured restates the "
                                                "closed-form points only"))
    doc = sweep_document(sw)
    doc["scenario"] = scenario_document(base)  # the model and GPU swept (layouts vary per point)
    if fit is not None:
        from servescope.perfmodel.memory import max_concurrency
        from servescope.planner.layouts import Layout
        from servescope.report.measured_doc import curve_points, measured_document

        doc["measured"] = measured_document(fit) | {
            "layout": Layout(base.tp, base.ep, base.dp).label(),
            "curve_points": curve_points(fit, n, int(max_concurrency(base)))}
    title = scenario_title(base, layout=False, backend=True, n_gpus=n)
    out.emit(doc, text=lambda console: render_sweep(title, doc, console, all_points))
