"""The measured per-op curves of specs/data/opcurves: what the extraction script computes from the aiconfigurator
wheel (only where /tmp/aic holds it: CI has no wheel), and checks that need no wheel — provenance on every table,
the loader against the raw JSON, and the physics of the numbers against the datasheets of specs/data/gpus."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench_scripts import ROOT, bench_script
from servescope.errors import BadConfig
from servescope.specs import opcurves, tables
from servescope.specs.hardware import load_gpu, resolve_gpu_name
from servescope.specs.opcurves import load_opcurves, opcurve_systems, version_number

DATA = ROOT / "src/servescope/specs/data/opcurves"
WHEEL = Path("/tmp/aic")
HAVE_WHEEL = (WHEEL / "aiconfigurator_core/systems/data/rtx_pro_6000_server").is_dir()
# peak each GEMM dtype runs at (weight-only int8 runs on the int8 path: H100 sglang 0.5.6.post2 reaches
# 1.17 PFLOP/s there, above the bf16 peak); element bytes of the weight
PEAK = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int8_wo": "int8"}
WEIGHT_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 0.5, "int8_wo": 1.0}


@pytest.mark.skipif(not HAVE_WHEEL, reason="needs the unzipped aiconfigurator-core 0.12.0 wheel in /tmp/aic")
def test_shipped_file_is_what_the_script_computes_from_the_wheel() -> None:
    script = bench_script("extract_op_curves")
    text = script.render(script.system_doc(WHEEL, "rtx_pro_6000_server"))  # the reference box; all: --check
    assert text == (DATA / "rtx_pro_6000_server.json").read_text(encoding="utf-8")


@pytest.mark.skipif(not HAVE_WHEEL, reason="needs the unzipped aiconfigurator-core 0.12.0 wheel in /tmp/aic")
def test_loaded_seconds_equal_the_parquet_milliseconds() -> None:
    import polars as pl

    path = WHEEL / "aiconfigurator_core/systems/data/rtx_pro_6000_server/gemm/vllm/0.24.0/gemm_perf.parquet"
    raw = pl.read_parquet(path).filter((pl.col("gemm_dtype") == "bfloat16") & (pl.col("n") == 7168)
                                       & (pl.col("k") == 2048) & (pl.col("m") == 128))
    table = next(t for t in load_opcurves("rtx_pro_6000_server") if t.op == "gemm" and t.engine == "vllm")
    row = table.curve(gemm_dtype="bfloat16", n=7168)
    assert row is not None
    got = table.time_s[row, table.grids[0].index(2048), table.grids[1].index(128)]
    assert got == pytest.approx(raw["latency"][0] * 1e-3, rel=5e-3)  # 3 significant digits


def test_every_system_is_a_gpu_spec_and_every_table_names_its_wheel_file() -> None:
    systems = opcurve_systems()
    assert {"rtx_pro_6000_server", "h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300"} <= set(systems)
    total = sum((DATA / f"{s}.json").stat().st_size for s in systems)
    assert total < 4e6  # the shipped budget (3.6 MB in 0.12.0)
    for system in systems:
        assert resolve_gpu_name(system) == system
        with (DATA / f"{system}.json").open(encoding="utf-8") as f:
            doc = json.loads(f.readline() + "]}")  # the header line (the script writes one curve per line)
        assert doc["SPDX-License-Identifier"] == "Apache-2.0" and "NVIDIA" in doc["SPDX-FileCopyrightText"]
        assert doc["system"] == system and doc["time_unit"] == "us"
        for t in load_opcurves(system):
            assert t.source.startswith(f"aiconfigurator_core/systems/data/{system}/")
            assert f"/{t.engine}/{t.version}/" in t.source and t.source.endswith(".parquet")
            assert t.framework and all(t.kernels)
            measured = t.time_s[np.isfinite(t.time_s)]
            assert measured.size and measured.min() > 0.5e-6 and measured.max() < 10.0  # s: 0.5 µs .. 10 s


def test_loader_matches_the_raw_json_cells() -> None:
    doc = json.loads((DATA / "rtx_pro_6000_server.json").read_text(encoding="utf-8"))
    raw = next(t for t in doc["tables"] if t["op"] == "moe" and t["engine"] == "vllm")
    row = next(r for r in raw["rows"] if r[:5] == ["int4_wo", 7168, 2048, 8, 384])
    cells_us = row[-1][0][3][0]  # moe_tp 1, moe_ep 8 (index 3 of [1, 2, 4, 8]), balanced, every num_tokens
    table = next(t for t in load_opcurves("rtx_pro_6000_server") if t.op == "moe" and t.engine == "vllm")
    r = table.curve(moe_dtype="int4_wo", hidden_size=7168, inter_size=2048, topk=8, num_experts=384)
    assert r is not None and table.kernels[r] == raw["kernel_sources"][row[-2]]
    got = table.time_s[r, 0, 3, 0]
    assert got[: len(cells_us)] == pytest.approx(np.array(cells_us, dtype=float) * 1e-6)


def test_gemm_curves_respect_the_datasheet_peak_and_hbm_bandwidth() -> None:
    """Physics, independent of the extraction: 2·M·N·K / t ≤ the dtype's dense peak everywhere, and for
    M ≤ 16 with weights above 4× L2 (not L2-resident) t ≥ weight bytes / HBM bandwidth. (At 2-3× L2 TRT-LLM's
    M = 1 GEMMs on the RTX PRO 6000 read at 1.03-1.05× its 1.597 TB/s: part of the weights stays in L2.)"""
    for system in opcurve_systems():
        gpu = load_gpu(system)
        for t in (t for t in load_opcurves(system) if t.op == "gemm"):
            k, m = (np.array(g, dtype=float) for g in t.grids)
            for r, key in enumerate(t.keys):
                kv = dict(zip(t.key, key, strict=True))
                dtype, n = str(kv["gemm_dtype"]), int(kv["n"])
                flops = 2 * m[None, :] * n * k[:, None] / t.time_s[r]
                assert np.nanmax(flops) <= gpu.flops_per_s[PEAK[dtype]], (system, t.engine, dtype, n)
                weights = n * k * WEIGHT_BYTES[dtype]
                big = weights > 4 * gpu.l2_bytes
                small_m = t.time_s[r][big][:, m <= 16]
                bound = (weights[big] / gpu.hbm_bw_bytes_per_s)[:, None]
                assert np.all(np.isnan(small_m) | (small_m >= bound)), (system, t.engine, dtype, n)


def test_version_number_orders_releases_candidates_and_posts() -> None:
    versions = ["1.3.0rc23", "0.5.6.post2", "0.24.0", "1.3.0", "0.5.6", "1.3.0rc10", "0.19.0"]
    assert sorted(versions, key=version_number) == [
        "0.5.6", "0.5.6.post2", "0.19.0", "0.24.0", "1.3.0rc10", "1.3.0rc23", "1.3.0"]


def test_unknown_system_has_no_tables_and_a_bad_file_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_opcurves("l40s") == ()
    monkeypatch.setattr(tables, "opcurve_systems", lambda: ["fake"])
    monkeypatch.setattr(tables, "opcurves", lambda system: {"time_unit": "us", "system": "fake", "tables": [
        {"op": "gemm", "engine": "vllm", "version": "1", "framework": "VLLM", "source": "x.parquet",
         "kernel_sources": ["k"], "fixed": {}, "key": ["gemm_dtype", "n", "kernel"], "axes": {"m": [1, 2]},
         "rows": [["bfloat16", 512, 0, [1.0, -2.0]]]}]})
    with pytest.raises(BadConfig, match=r"opcurves/fake.json: table 0 \(gemm/vllm/1\)"):
        opcurves.load_opcurves.__wrapped__("fake")


def _same_table(a: opcurves.OpTable, b: opcurves.OpTable) -> bool:
    import dataclasses

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if not (np.array_equal(x, y, equal_nan=True) if isinstance(x, np.ndarray) else x == y):
            return False
    return True


@pytest.mark.parametrize("system", opcurve_systems())
def test_one_ops_tables_are_the_full_loads_tables_of_that_op(system: str) -> None:
    """load_opcurves(system, op) (what the trace's "% of achievable" reads: the GEMMs) builds the same tables,
    domains and version windows included, as the full load filtered to that op."""
    full = load_opcurves(system)
    for op in sorted({t.op for t in full}):
        part, want = load_opcurves(system, op), [t for t in full if t.op == op]
        assert len(part) == len(want) and all(_same_table(a, b) for a, b in zip(part, want, strict=True)), op


def test_one_op_reads_only_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded work: a malformed table of another op is not read by a load of the GEMMs; the full load refuses it."""
    gemm = {"op": "gemm", "engine": "vllm", "version": "0.24.0", "framework": "VLLM", "source": "x.parquet",
            "kernel_sources": ["k"], "fixed": {}, "key": ["gemm_dtype", "n", "k", "kernel"], "axes": {"m": [1, 2]},
            "rows": [["bfloat16", 512, 512, 0, [1.0, 2.0]]]}
    broken = {"op": "moe", "engine": "vllm"}  # no version, no rows
    monkeypatch.setattr(tables, "opcurve_systems", lambda: ["fake"])
    monkeypatch.setattr(tables, "opcurves", lambda system: {"time_unit": "us", "system": "fake",
                                                            "tables": [gemm, broken]})
    got = opcurves.load_opcurves.__wrapped__("fake", "gemm")
    assert [(t.op, t.engine, t.version, t.keys) for t in got] == [("gemm", "vllm", "0.24.0", (("bfloat16", 512, 512),))]
    with pytest.raises(BadConfig, match=r"opcurves/fake.json: table 1"):
        opcurves.load_opcurves.__wrapped__("fake")
