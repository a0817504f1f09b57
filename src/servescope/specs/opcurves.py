"""Measured per-op silicon curves per GPU system, engine and engine version (aiconfigurator-core 0.12.0), as arrays.

What it does: `load_opcurves(system)` parses specs/data/opcurves/<system>.json (written by
data-build/extract_op_curves.py; format, grids and provenance in the README beside it) into `OpTable`s, one per
(op, engine, version) Parquet file of the wheel. A table is a stack of curves, one per key (GEMM: gemm_dtype, n;
MoE: moe_dtype, hidden_size, inter_size, topk, num_experts; ...), each over the table's grid axes (GEMM: k, m;
attention: batch_size, kv_len; MoE: moe_tp_size, moe_ep_size, distribution, num_tokens). Time is in SECONDS here
(the file stores µs), NaN where the point was not measured. `opcurve_systems()` lists the systems;
`version_number` orders engine versions.
What it does not: interpolate, match shapes or choose a version (perfmodel.opcurve does), or read Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables

OPS = ("gemm", "generation_attention", "context_attention", "generation_mla", "context_mla",
       "generation_mla_module", "context_mla_module", "moe")
ENGINES = ("vllm", "sglang", "trtllm")
_US_TO_S = 1e-6

KeyValue = int | str


@dataclass(frozen=True)
class OpTable:
    """The curves of one op file: `time_s[i]` is curve i (key `keys[i]`, kernel `kernels[i]`) over `grids`."""

    system: str
    op: str
    engine: str
    version: str
    framework: str
    source: str                                  # the Parquet file inside the wheel
    key: tuple[str, ...]                         # the key columns of a curve, fixed ones included
    keys: tuple[tuple[KeyValue, ...], ...]
    kernels: tuple[str, ...]                     # kernel_source of each curve
    axes: tuple[str, ...]
    grids: tuple[tuple[KeyValue, ...], ...]
    time_s: np.ndarray                           # (len(keys), *map(len, grids)); NaN: not measured
    index: dict[tuple[KeyValue, ...], int] = field(default_factory=dict, compare=False, repr=False)

    def curve(self, **key: KeyValue) -> int | None:
        """The row of the curve with exactly this key (every key column named), or None."""
        return self.index.get(tuple(key[c] for c in self.key))

    def cite(self, row: int) -> str:
        """Where curve `row` comes from: the wheel file, framework, version and kernel."""
        return (f"{self.source} ({self.framework} {self.version}, kernel {self.kernels[row]}; "
                "aiconfigurator-core 0.12.0)")


def version_number(version: str) -> tuple[int, ...]:
    """Sort key of an engine version: '0.5.6.post2' → (0, 5, 6, 2, 0, 0); '1.3.0rc20' → (1, 3, 0, 0, -1, 20)
    (a release candidate sorts before its release)."""
    head, _, rc = version.partition("rc")
    parts = head.replace(".post", ".").replace(".dev", ".").split(".")
    nums = [int(p) if p.isdigit() else 0 for p in parts][:4]
    nums += [0] * (4 - len(nums))
    return (*nums, -1, int(rc) if rc.isdigit() else 0) if rc else (*nums, 0, 0)


def opcurve_systems() -> list[str]:
    """The GPU systems (project spec names) with measured per-op curves."""
    return tables.opcurve_systems()


@cache
def load_opcurves(system: str) -> tuple[OpTable, ...]:
    """Every table of one system (empty when the system has no curves); raises BadConfig on a malformed file."""
    if system not in tables.opcurve_systems():
        return ()
    path = f"specs/data/opcurves/{system}.json"
    doc = tables.opcurves(system)
    if not isinstance(doc, dict) or doc.get("time_unit") != "us" or not isinstance(doc.get("tables"), list):
        raise BadConfig(f"{path}: needs 'time_unit' = 'us' and a list 'tables'")
    return tuple(_table(path, system, i, t) for i, t in enumerate(doc["tables"]))


def _table(path: str, system: str, i: int, t: Any) -> OpTable:
    where = f"{path}: table {i}"
    try:
        op, engine, version = str(t["op"]), str(t["engine"]), str(t["version"])
        where = f"{path}: table {i} ({op}/{engine}/{version})"
        fixed: dict[str, KeyValue] = dict(t["fixed"])
        varying = [str(c) for c in t["key"]]
        kernels = [str(k) for k in t["kernel_sources"]]
        axes = tuple(str(a) for a in t["axes"])
        grids = tuple(tuple(t["axes"][a]) for a in axes)
        rows = list(t["rows"])
        source, framework = str(t["source"]), str(t["framework"])
    except (KeyError, TypeError, ValueError) as e:
        raise BadConfig(f"{where}: missing or malformed field ({e})") from None
    if op not in OPS or not axes or varying[-1:] != ["kernel"] or not rows:
        raise BadConfig(f"{where}: unknown op, no axes, no rows, or a key not ending in 'kernel'")
    key = (*fixed, *varying[:-1])
    time_s = np.full((len(rows), *map(len, grids)), np.nan)
    keys: list[tuple[KeyValue, ...]] = []
    curve_kernels: list[str] = []
    for r, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(varying) + 1:
            raise BadConfig(f"{where}: row {r} has {len(row) if isinstance(row, list) else 'no'} fields, "
                            f"expected {len(varying) + 1}")
        kernel = row[-2]
        if not isinstance(kernel, int) or not 0 <= kernel < len(kernels):
            raise BadConfig(f"{where}: row {r} names kernel {kernel!r}, not one of {len(kernels)}")
        keys.append((*fixed.values(), *row[:-2]))
        curve_kernels.append(kernels[kernel])
        try:
            _fill(time_s[r], row[-1])
        except (TypeError, ValueError, IndexError):
            raise BadConfig(f"{where}: row {r}: cells are not numbers or null, or do not fit the axes") from None
    bad = time_s[np.isfinite(time_s)] <= 0
    if bad.any() or not np.isfinite(time_s).any(axis=tuple(range(1, time_s.ndim))).all():
        raise BadConfig(f"{where}: a curve has no measured point or a time that is not > 0")
    index = {k: r for r, k in enumerate(keys)}
    if len(index) != len(keys):
        raise BadConfig(f"{where}: two curves share a key")
    return OpTable(system, op, engine, version, framework, source, key, tuple(keys), tuple(curve_kernels), axes,
                   grids, time_s * _US_TO_S, index)


def _fill(out: np.ndarray, cells: Any) -> None:
    """Copy nested lists of µs (trailing points may be left out; None: not measured, becomes NaN) into `out`;
    a cell that is not a number, or lists longer than the axes, raise TypeError / ValueError / IndexError."""
    if out.ndim == 1:
        out[: len(cells)] = cells
        return
    for j, sub in enumerate(cells):
        _fill(out[j], sub)
