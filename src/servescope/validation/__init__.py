"""servescope.validation — the model held against what was measured (the only stage that reads measured results).

    validate        predicted vs measured TPOT/TTFT for a CSV of serving results (rows, MAPE, ranges)
    crossval        the same out of fold: refit without a model / GPU / backend, predict it
    fit             the global efficiency fit (data-build/fit_efficiency.py writes specs/data/efficiency.toml)
    benchfile       `vllm bench serve` / `sglang.bench_serving` result files and server settings; benchio reads them
    pairs           the pair ledger: measured before/after pairs per plan track, scored (sign, error, range)
    spec_pairs      measured with/without speculative decoding pairs; spec_fit fits the host costs
    simulate_rows   the simulation on validation rows; simulate_fit its fit

Does not: price anything itself (perfmodel, simulate) or format (report).
"""
