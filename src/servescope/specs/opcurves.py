"""Measured per-op silicon curves per GPU system, engine and engine version (aiconfigurator-core 0.12.0), as arrays.

What it does: `load_opcurves(system)` parses specs/data/opcurves/<system>.json (written by
data-build/extract_op_curves.py; format, grids and provenance in the README beside it) into `OpTable`s, one per
(op, engine, version) Parquet file of the wheel. A table is a stack of curves, one per key (GEMM: gemm_dtype, n;
MoE: moe_dtype, hidden_size, inter_size, topk, num_experts; ...), each over the table's grid axes (GEMM: k, m;
attention: batch_size, kv_len; MoE: moe_tp_size, moe_ep_size, distribution, num_tokens). Time is in SECONDS here
(the file stores µs), NaN where the point was not measured. `opcurve_systems()` lists the systems;
`version_number` orders engine versions.
Each table carries its domain (`OpDomain`, built at load from the file's own fields): the GPU system, the engine and
the range of its versions the table may answer for, the kernels (kernel_source), the dtypes of its key (weights,
activations, KV cache), the measured range of every numeric key column and every grid axis (min/max over the
points actually measured), and the categories of the others. A file or table lacking a domain field (the file's
`system`, a table's engine/version/kernel_sources/axes, or a dtype column its op needs) is refused at load with the
file name and the field — never used partly.
Version rule (`OpDomain.answers`): a table measured on release v answers for v and the newer releases of the same
engine up to, not including, the next measured version of that op, and only inside v's major.minor series (vLLM
0.24.x, SGLang 0.5.x, TRT-LLM 1.3.x). Why: a kernel table prices the kernels that release runs; an OLDER release may
lack the kernel or take a slower path for it (SGLang 0.5.9's MLA is not 0.5.14's; the issue-27 DeepSeek-R1 case),
so it is never answered for; a newer patch release keeps its series' kernels until a newer measurement says
otherwise; a new major.minor series (vLLM ships new attention backends and defaults per minor) is a new domain.
No version named ("") means the newest release, which the newest table answers for.
What it does not: interpolate, match shapes or choose a version (perfmodel.opcurve does), or read Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import numpy as np

from servescope.errors import BadConfig
from servescope.specs import tables

OPS = ("gemm", "generation_attention", "context_attention", "generation_mla", "context_mla",
       "generation_mla_module", "context_mla_module", "moe")
_US_TO_S = 1e-6
# the dtype columns a table of each op must name (in its fixed or varying key): what the domain's dtypes are read from
_DTYPE_COLUMNS = {"gemm": ("gemm_dtype",), "generation_attention": ("kv_cache_dtype",),
                  "context_attention": ("attn_dtype", "kv_cache_dtype"), "generation_mla": ("mla_dtype", "kv_cache_dtype"),
                  "context_mla": ("mla_dtype", "kv_cache_dtype"),
                  "generation_mla_module": ("mla_dtype", "kv_cache_dtype", "gemm_type"),
                  "context_mla_module": ("mla_dtype", "kv_cache_dtype", "gemm_type"), "moe": ("moe_dtype",)}
# context_attention tables of some engines measured bf16 attention only and leave attn_dtype out (vLLM 0.22)
_IMPLIED = {"context_attention": {"attn_dtype": "bfloat16"}}

KeyValue = int | str


@dataclass(frozen=True)
class OpDomain:
    """Where one table may answer: system, engine and version window [version, until) inside its major.minor series
    (until "": the end of the series), kernels, dtypes (column → values), and the measured range of each numeric key
    column and grid axis ((min, max) over measured points) or the categories of a non-numeric one."""

    system: str
    op: str
    engine: str
    version: str
    until: str
    kernels: tuple[str, ...]
    dtypes: tuple[tuple[str, tuple[str, ...]], ...]
    key_ranges: tuple[tuple[str, tuple[float, float]], ...]
    axis_ranges: tuple[tuple[str, tuple[float, float]], ...]
    categories: tuple[tuple[str, tuple[str, ...]], ...]

    def answers(self, version: str) -> bool:
        """Whether this table answers for `version` of its engine (module docstring's version rule)."""
        if version == self.version:
            return True
        v, lo = version_number(version), version_number(self.version)
        if v < lo or v[:2] != lo[:2] or not any(v[:4]):
            return False
        return not self.until or v < version_number(self.until)

    def window(self) -> str:
        """The version window in words: '0.5.14 ≤ v < 0.5.20 (series 0.5)'."""
        lo = version_number(self.version)
        series = f"{lo[0]}.{lo[1]}"
        return f"{self.version} ≤ v" + (f" < {self.until}" if self.until else "") + f" (series {series}.x)"

    def axis(self, name: str) -> tuple[float, float]:
        """The measured (min, max) of a numeric grid axis."""
        return dict(self.axis_ranges)[name]


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
    domain: OpDomain
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


@cache
def _engines() -> tuple[str, ...]:
    """The known engines (specs.engines.ENGINES: the names of the engines' files, not the files parsed)."""
    return tables.engines_in_order()


def opcurve_systems() -> list[str]:
    """The GPU systems (project spec names) with measured per-op curves."""
    return tables.opcurve_systems()


@cache
def load_opcurves(system: str, op: str | None = None) -> tuple[OpTable, ...]:
    """Every table of one system, or only those of `op` (empty when the system has no curves); raises BadConfig on
    a malformed file (on a malformed table of `op` when one is named: the others are not read). An op's tables are
    the same either way (a table's domain reads only its own op's tables); the trace's "% of achievable" reads the
    GEMMs only, ~1/15 of the work of building every table (issue 30)."""
    if system not in tables.opcurve_systems():
        return ()
    path = f"specs/data/opcurves/{system}.json"
    doc = tables.opcurves(system)
    if not isinstance(doc, dict) or doc.get("time_unit") != "us" or not isinstance(doc.get("tables"), list):
        raise BadConfig(f"{path}: needs 'time_unit' = 'us' and a list 'tables'")
    if doc.get("system") != system:
        raise BadConfig(f"{path}: domain field 'system' is {doc.get('system')!r}, not {system!r}")
    raw = [_table(path, system, i, t) for i, t in enumerate(doc["tables"])
           if op is None or (isinstance(t, dict) and t.get("op") == op)]
    return tuple(_with_window(t, raw) for t in raw)


def _with_window(t: OpTable, every: list[OpTable]) -> OpTable:
    """`t` with its domain's upper version bound: the next measured version of the same op and engine, if any."""
    v = version_number(t.version)
    newer = sorted((o.version for o in every if o.op == t.op and o.engine == t.engine
                    and version_number(o.version) > v), key=version_number)
    return replace(t, domain=replace(t.domain, until=newer[0] if newer else ""))


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
    domain = _domain(where, system, op, engine, version, key, keys, kernels, axes, grids, time_s)
    return OpTable(system, op, engine, version, framework, source, key, tuple(keys), tuple(curve_kernels), axes,
                   grids, time_s * _US_TO_S, domain, index)


def _domain(where: str, system: str, op: str, engine: str, version: str, key: tuple[str, ...],
            keys: list[tuple[KeyValue, ...]], kernels: list[str], axes: tuple[str, ...],
            grids: tuple[tuple[KeyValue, ...], ...], time_s: np.ndarray) -> OpDomain:
    """The domain of one table from its own fields and measured points (module docstring); BadConfig naming the
    missing field where a dtype column its op needs is absent, or the engine or version is empty."""
    if engine not in _engines() or not any(version_number(version)[:4]):
        raise BadConfig(f"{where}: domain field 'engine'/'version' must name a known engine and a release number")
    if not kernels:
        raise BadConfig(f"{where}: domain field 'kernel_sources' is empty")
    cols = {c: sorted({str(k[i]) for k in keys}) for i, c in enumerate(key)}
    for c, v in _IMPLIED.get(op, {}).items():
        cols.setdefault(c, [v])
    missing = [c for c in _DTYPE_COLUMNS[op] if c not in cols]
    if missing:
        raise BadConfig(f"{where}: domain field {missing[0]!r} (a dtype column of {op}) is missing")
    dtypes = tuple((c, tuple(cols[c])) for c in _DTYPE_COLUMNS[op])
    key_ranges = tuple((c, (float(min(int(k[i]) for k in keys)), float(max(int(k[i]) for k in keys))))
                       for i, c in enumerate(key) if all(isinstance(k[i], int) for k in keys))
    measured = np.isfinite(time_s)
    ranges, cats = [], []
    for j, (a, grid) in enumerate(zip(axes, grids, strict=True)):
        hit = measured.any(axis=tuple(d for d in range(measured.ndim) if d != j + 1))
        vals = [g for g, h in zip(grid, hit, strict=True) if h]
        if all(isinstance(g, int | float) for g in vals):
            ranges.append((a, (float(min(vals)), float(max(vals)))))  # type: ignore[type-var]
        else:
            cats.append((a, tuple(str(g) for g in vals)))
    return OpDomain(system, op, engine, version, "", tuple(kernels), dtypes, key_ranges, tuple(ranges), tuple(cats))


def _fill(out: np.ndarray, cells: Any) -> None:
    """Copy nested lists of µs (trailing points may be left out; None: not measured, becomes NaN) into `out`;
    a cell that is not a number, or lists longer than the axes, raise TypeError / ValueError / IndexError."""
    if out.ndim == 1:
        out[: len(cells)] = cells
        return
    for j, sub in enumerate(cells):
        _fill(out[j], sub)
