"""Extract measured per-op silicon curves from aiconfigurator-core 0.12.0 (PyPI, Apache-2.0) into
src/servescope/specs/data/opcurves/<system>.json (read by servescope.specs.opcurves; README.md beside the data).

Usage: .venv/bin/python data-build/extract_op_curves.py [WHEEL_ROOT] [OUT_DIR] [--dry-run]
  WHEEL_ROOT  the unzipped wheel (default /tmp/aic): holds aiconfigurator_core/systems/data/<system>/<op>/<engine>/
              <version>/*.parquet. Get it with
              pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aic && cd /tmp/aic && \
                unzip -q *.whl 'aiconfigurator_core/systems/*'
  OUT_DIR     default src/servescope/specs/data/opcurves

What is kept (the Parquet files hold ~60 MB for these systems; the shipped JSON ~3.6 MB, so each table is a
subsample; the grids were chosen by the log-log interpolation error on the points left out, see the README):
  * one table per (op file, engine, version) present for each system of SYSTEMS, ops as in OPS. A curve is one key
    (GEMM: gemm_dtype, n; attention: kv_cache_dtype, head_dim, num_heads, num_key_value_heads; MoE: moe_dtype,
    hidden_size, inter_size, topk, num_experts; ...) over the op's grid axes (GEMM: k, m; attention and MLA:
    batch_size, kv_len; MoE: moe_tp_size, moe_ep_size, distribution, num_tokens); only the GRIDS values are kept.
  * rows kept: attention window_size 0 (no sliding window), per-GPU heads 2-64 with 1-8 KV heads and at most 16
    query heads per KV head; MoE pure TP or pure EP over at most 8 GPUs; GEMM N, K of the n/k grids.
  * kv_len = isl + step (generation tables store the past as `step`; context rows have step 0, kv_len = isl); the
    module tables' 2^k + 1 is kept at 2^k (one token).
  * several kernel_source values for one curve key: the curve keeps the one with the lowest geometric-mean latency
    on the grid points all of them measured (none shared: the one with more points) and names it; a curve never
    mixes kernels. Repeated measurements of a point (none in 0.12.0) would be reduced to their median.
  * latency (ms in the Parquet files) is written in MICROSECONDS, 3 significant digits; null: not measured
    (e.g. large batch x long context that did not fit); trailing nulls of a list are left out.
  * a key column with one value in a whole table is written once, under "fixed".
Every table names its Parquet file inside the wheel, framework and version; every curve its kernel_source.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "servescope" / "specs" / "data" / "opcurves"
WHEEL = "aiconfigurator-core 0.12.0 (PyPI)"
COPYRIGHT = "Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES."
# the GPUs of tests/data/validation/measured_serving_dev.csv and the reference box (issue 18)
SYSTEMS = ("rtx_pro_6000_server", "h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "gb300")
ENGINES = ("vllm", "sglang", "trtllm")

GRIDS: dict[str, list[Any]] = {
    # GEMM: rows M (tokens) and the (N, K) families kept (N or K < 512, 768, 2560, 3584, 10240, 51200 are left out)
    "m": [1, 8, 32, 64, 128, 256, 512, 2048, 8192, 32768],
    "n": [512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384, 65536],
    "k": [512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384],
    "num_tokens": [1, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384],     # MoE tokens per step
    "moe_tp_size": [1, 2, 4, 8],
    "moe_ep_size": [1, 2, 4, 8],
    # MoE expert load; power_law_1.2 is left out: it is within 10% of power_law_1.01 on 89% of the points
    # (median ratio 1.000), while both differ from balanced by up to 2x
    "distribution": ["balanced", "power_law_1.01"],
    "batch_decode": [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024],
    "kv_decode": [64, 256, 1024, 2048, 4096, 8192, 32768, 131072],    # below 64: flat (launch floor)
    "batch_prefill": [1, 4, 16, 64],
    "isl": [16, 64, 256, 1024, 4096, 16384, 32768],
    "heads": [2, 4, 8, 16, 32, 64],
    "kv_heads": [1, 2, 4, 8],
}


@dataclass(frozen=True)
class Op:
    """One op file: its curve key columns, its grid axes (column, GRIDS name) and the rows kept."""

    name: str                      # op name written in the data
    file: str                      # Parquet file name under <system>/<folder>/<engine>/<version>/
    folder: str
    key: tuple[str, ...]
    axes: tuple[tuple[str, str], ...]
    keep: pl.Expr | None = None    # the rows kept, or all


_NO_WINDOW = pl.col("window_size") == 0
_HEADS = (pl.col("num_heads").is_in(GRIDS["heads"]) & pl.col("num_key_value_heads").is_in(GRIDS["kv_heads"])
          & (pl.col("num_heads") <= 16 * pl.col("num_key_value_heads")))
# MoE: pure TP or pure EP over at most 8 GPUs (the mixed and wide-EP rows of some files are left out)
_MOE = ((pl.col("moe_tp_size") * pl.col("moe_ep_size") <= 8)
        & ((pl.col("moe_tp_size") == 1) | (pl.col("moe_ep_size") == 1)))
_DECODE = (("batch_size", "batch_decode"), ("kv_len", "kv_decode"))
_PREFILL = (("batch_size", "batch_prefill"), ("kv_len", "isl"))
OPS = (
    Op("gemm", "gemm_perf.parquet", "gemm", ("gemm_dtype", "n"), (("k", "k"), ("m", "m")),
       pl.col("n").is_in(GRIDS["n"])),
    Op("generation_attention", "generation_attention_perf.parquet", "attention",
       ("kv_cache_dtype", "head_dim", "num_heads", "num_key_value_heads"), _DECODE, _NO_WINDOW & _HEADS),
    Op("context_attention", "context_attention_perf.parquet", "attention",
       ("attn_dtype", "kv_cache_dtype", "head_dim", "num_heads", "num_key_value_heads"), _PREFILL,
       _NO_WINDOW & _HEADS),
    Op("generation_mla", "generation_mla_perf.parquet", "mla", ("mla_dtype", "kv_cache_dtype", "num_heads"),
       _DECODE),
    Op("context_mla", "context_mla_perf.parquet", "mla", ("mla_dtype", "kv_cache_dtype", "num_heads"), _PREFILL),
    Op("generation_mla_module", "mla_generation_module_perf.parquet", "mla",
       ("model", "mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads"), _DECODE),
    Op("context_mla_module", "mla_context_module_perf.parquet", "mla",
       ("model", "mla_dtype", "kv_cache_dtype", "gemm_type", "num_heads"), _PREFILL),
    Op("moe", "moe_perf.parquet", "moe",
       ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts"),
       (("moe_tp_size", "moe_tp_size"), ("moe_ep_size", "moe_ep_size"), ("distribution", "distribution"),
        ("num_tokens", "num_tokens")), _MOE),
)


def vkey(version: str) -> tuple[int, ...]:
    """Sort key of an engine version: 1.3.0rc20 → (1, 3, 0, -1, 20) (an rc sorts before its release)."""
    head, _, rc = version.partition("rc")
    nums = [int(x) if x.isdigit() else 0 for x in head.replace(".post", ".").replace(".dev", ".").split(".")]
    return (*nums, -1, int(rc) if rc.isdigit() else 0) if rc else (*nums, 0, 0)


def sig3(ms: float) -> float | int:
    """A latency in ms as µs rounded to 3 significant digits (an int when it has no fraction)."""
    us = ms * 1000.0
    if not math.isfinite(us) or us <= 0:
        raise ValueError(f"latency {ms!r} ms is not a positive number")
    value = round(us, 2 - math.floor(math.log10(us)))
    return int(value) if value == int(value) else value


def _chosen_kernels(df: pl.DataFrame, key: list[str], axes: list[str]) -> pl.DataFrame:
    """Per curve key, the kernel_source kept: the lowest mean log latency on the grid points every kernel of that key
    measured; ties or no shared point: more points, then the name."""
    nk = df.group_by(key).agg(pl.col("kernel_source").n_unique().alias("_nk"))
    shared = (df.group_by([*key, *axes]).agg(pl.col("kernel_source").n_unique().alias("_np")).join(nk, on=key)
              .filter(pl.col("_np") == pl.col("_nk")).select([*key, *axes]))
    score = (df.join(shared, on=[*key, *axes]).group_by([*key, "kernel_source"])
             .agg(pl.col("latency").log().mean().alias("_score")))
    ranked = (df.group_by([*key, "kernel_source"]).len().join(score, on=[*key, "kernel_source"], how="left")
              .with_columns(pl.col("_score").fill_null(float("inf")))
              .sort([*key, "_score", "len", "kernel_source"], descending=[False] * len(key) + [False, True, False]))
    return ranked.group_by(key, maintain_order=True).first().select([*key, "kernel_source"])


def _table(op: Op, path: Path, rel: str) -> dict[str, Any] | None:
    """One Parquet file as a table of curves (see the module docstring), or None when no row is kept."""
    df = pl.read_parquet(path)
    head = df.row(0, named=True) if df.height else {}
    if "step" in df.columns:  # kv length = isl + step; the module tables' 2^k + 1 is kept at 2^k (one token)
        kv = pl.col("isl") + pl.col("step")
        df = df.with_columns(pl.when((kv - 1).is_in(GRIDS[op.axes[-1][1]])).then(kv - 1).otherwise(kv)
                             .alias("kv_len"))
    if op.keep is not None:
        df = df.filter(op.keep)
    axes = [col for col, _ in op.axes]
    for col, grid_name in op.axes:
        df = df.filter(pl.col(col).is_in(GRIDS[grid_name]))
    key = list(op.key)
    if df.is_empty():
        return None
    # repeated measurements of one point by one kernel (none in 0.12.0): their median
    df = df.group_by([*key, "kernel_source", *axes]).agg(pl.col("latency").median())
    df = df.join(_chosen_kernels(df, key, axes), on=[*key, "kernel_source"])
    kernels = sorted(df["kernel_source"].unique().to_list())
    keys = df.select(key).unique().sort(key)
    keys = keys.with_row_index("_row")
    df = df.join(keys, on=key)
    grids = [GRIDS[g] for _, g in op.axes]
    shape = (keys.height, *(len(g) for g in grids))
    cube = np.full(shape, np.nan)
    index = [df["_row"].to_numpy()]
    for col, values in zip(axes, grids, strict=True):
        lookup = {v: i for i, v in enumerate(values)}
        index.append(np.array([lookup[v] for v in df[col].to_list()]))
    cube[tuple(index)] = df["latency"].to_numpy()
    kernel_of = dict(zip(df["_row"].to_list(), df["kernel_source"].to_list(), strict=False))
    # a key column with one value in the whole table is written once, under "fixed"
    fixed = {c: keys[c][0] for c in key if keys[c].n_unique() == 1}
    varying = [c for c in key if c not in fixed]
    rows = [[*(r[c] for c in varying), kernels.index(kernel_of[r["_row"]]), _cells(cube[r["_row"]])]
            for r in keys.iter_rows(named=True)]
    return {"op": op.name, "engine": path.parts[-3], "version": path.parts[-2], "framework": head["framework"],
            "device": head["device"], "source": rel, "kernel_sources": kernels, "fixed": fixed, "key": [*varying, "kernel"],
            "axes": {col: GRIDS[g] for col, g in op.axes}, "rows": rows}


def _cells(ms: np.ndarray) -> Any:
    """Nested lists of µs (3 significant digits), None where not measured; trailing Nones are left out (a
    reader pads every list to its axis)."""
    if ms.ndim > 1:
        out: list[Any] = [_cells(sub) for sub in ms]
        while out and out[-1] == []:
            out.pop()
        return out
    cells = [None if math.isnan(v) else sig3(v) for v in ms.tolist()]
    while cells and cells[-1] is None:
        cells.pop()
    return cells


def system_doc(wheel_root: Path, system: str) -> dict[str, Any]:
    """The document written for one system: header, then one table per (op file, engine, version) present."""
    base = wheel_root / "aiconfigurator_core" / "systems" / "data" / system
    tables: list[dict[str, Any]] = []
    device = ""
    for op in OPS:
        for engine in ENGINES:
            folder = base / op.folder / engine
            if not folder.is_dir():
                continue
            for vdir in sorted((p for p in folder.iterdir() if (p / op.file).is_file()), key=lambda p: vkey(p.name)):
                rel = (vdir / op.file).relative_to(wheel_root).as_posix()
                table = _table(op, vdir / op.file, rel)
                if table is not None:
                    measured_on = str(table.pop("device"))
                    device = device or measured_on
                    tables.append(table)
    return {"about": f"Measured per-op curves for {system} from {WHEEL}, written by data-build/extract_op_curves.py "
                     "(do not edit by hand; provenance and format: README.md beside this file)",
            "SPDX-FileCopyrightText": COPYRIGHT, "SPDX-License-Identifier": "Apache-2.0",
            "system": system, "device": device, "wheel": WHEEL, "time_unit": "us", "tables": tables}


def render(doc: dict[str, Any]) -> str:
    """Compact JSON with one curve per line (diffable), header and table fields first."""
    dump = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
    head = {k: v for k, v in doc.items() if k != "tables"}
    lines = ["{" + ",".join(f"{dump(k)}:{dump(v)}" for k, v in head.items()) + ',"tables":[']
    for i, table in enumerate(doc["tables"]):
        meta = {k: v for k, v in table.items() if k != "rows"}
        lines.append("{" + ",".join(f"{dump(k)}:{dump(v)}" for k, v in meta.items()) + ',"rows":[')
        lines.extend(dump(r) + ("," if j < len(table["rows"]) - 1 else "") for j, r in enumerate(table["rows"]))
        lines.append("]}" + ("," if i < len(doc["tables"]) - 1 else ""))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("wheel_root", nargs="?", type=Path, default=Path("/tmp/aic"))
    ap.add_argument("out_dir", nargs="?", type=Path, default=OUT)
    ap.add_argument("--dry-run", action="store_true", help="print a summary, write nothing")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file in OUT_DIR differs")
    args = ap.parse_args(argv)
    if not (args.wheel_root / "aiconfigurator_core" / "systems" / "data").is_dir():
        print(f"{args.wheel_root}: no aiconfigurator_core/systems/data (unzip the wheel there)", file=sys.stderr)
        return 1
    total, differ = 0, []
    for system in SYSTEMS:
        text = render(system_doc(args.wheel_root, system))
        total += len(text.encode())
        doc = json.loads(text)
        summary = ", ".join(f"{t['op']}/{t['engine']}/{t['version']}:{len(t['rows'])}" for t in doc["tables"])
        print(f"{system}: {len(text.encode()) / 1e3:.0f} kB  {summary}")
        path = args.out_dir / f"{system}.json"
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                differ.append(path.name)
        elif not args.dry_run:
            args.out_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    done = " (nothing written)" if args.dry_run or args.check else f" in {args.out_dir}"
    print(f"total {total / 1e6:.2f} MB{done}")
    if differ:
        print(f"{args.out_dir}: differs from the wheel for {', '.join(differ)}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
