"""GPU specifications: bundled TOML data (one file per GPU, a source for every number) → `GpuSpec` in SI.

What it does: reads `specs/data/gpus/<name>.toml`, converts each number to SI through `servescope.units`
according to the unit spelled in its key (`value_tb_per_s`, `value_tflops`, `value_gib`, ...), keeps the
source of every number, resolves aliases (`H100-SXM`, `h100`, `NVIDIA B200`, `rtx-pro-6000`).
What it does not do: collectives (see `specs.collectives`), model specs, any performance modelling.

TOML layout (see docs/hardware.md): top-level strings `name, display_name, vendor, generation, arch,
compute_capability, interconnect` and `aliases`; then one table per number with exactly one `value*` key
and a `source` string, e.g. `[hbm_bw] value_tb_per_s = 3.35, source = "AIC-SYS h100_sxm.yaml"`.
Dense tensor-core peaks sit under `[flops.<dtype>]`. A source containing "UNSOURCED" is listed in
`GpuSpec.unsourced` so that callers can flag results resting on it.
"""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from servescope import units
from servescope.errors import BadConfig, UnknownName
from servescope.specs import tables

DTYPES = ("bf16", "fp8", "fp4", "int8")


def _bidir_gb_per_s(v: float) -> float:
    # A "bidir" figure is the sum of both directions; GpuSpec bandwidths are per direction.
    return units.gb_per_s_to_bytes_per_s(v) / 2


# Unit suffix of a `value_*` key → converter to SI. Plain `value` is a count, a flag or an integer.
_CONVERTERS: dict[str, Callable[[float], float]] = {
    "value_bytes": float,
    "value_gb": units.gb_to_bytes,
    "value_gib": units.gib_to_bytes,
    "value_mib": lambda v: units.gib_to_bytes(v / 1024),
    "value_tb_per_s": units.tb_per_s_to_bytes_per_s,
    "value_gb_per_s": units.gb_per_s_to_bytes_per_s,
    "value_gb_per_s_bidir": _bidir_gb_per_s,
    "value_tflops": units.tflops_to_flops,
    "value_fraction": float,
    "value_w": float,
    "value_gpus": float,
    "value_us": units.us_to_s,
}

_REQUIRED_STR = ("name", "display_name", "vendor", "generation", "arch", "compute_capability", "interconnect")
_REQUIRED_NUM = ("sm_count", "hbm", "hbm_bw", "l2", "nvlink_bw", "pcie_gen", "pcie_bw", "p2p", "nvlink_domain")
_OPTIONAL_NUM = ("max_threads_per_sm", "smem_per_block_optin", "tdp", "hbm_bw_efficiency", "bf16_matmul_measured")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU, SI units. Bandwidths are per GPU and per direction; FLOP/s are dense tensor-core peaks.

    `flops_per_s[dtype]` is 0.0 when the GPU has no tensor-core path for the dtype; a dtype missing from
    the dict has no sourced number. `sources` maps each field (`flops.fp8` for peaks) to its source.
    """

    name: str
    display_name: str
    vendor: str                       # "nvidia" | "amd"
    generation: str                   # "ampere" | "ada" | "hopper" | "blackwell" | "cdna3"
    arch: str                         # die or architecture name, e.g. "GH100", "GB202", "CDNA3"
    compute_capability: str           # "sm_90", "gfx942", ...
    interconnect: str                 # GPU-to-GPU fabric: "nvlink3|4|5", "xgmi" or "pcie"
    sm_count: int                     # SMs (NVIDIA) or compute units (AMD)
    hbm_bytes: float                  # device memory (HBM or GDDR)
    hbm_bw_bytes_per_s: float         # peak device-memory bandwidth
    flops_per_s: dict[str, float]     # dense peaks keyed by DTYPES
    l2_bytes: float
    nvlink_bw_bytes_per_s: float      # NVLink/XGMI per GPU, one direction; 0 when none
    nvlink_domain_gpus: int           # GPUs reachable over NVLink/XGMI (8 HGX, 72 NVL72); 0 when none
    pcie_gen: int
    pcie_bw_bytes_per_s: float        # host link, one direction
    p2p: bool                         # GPU-to-GPU peer access works out of the box
    sources: dict[str, str]
    max_threads_per_sm: int | None = None
    smem_per_block_optin_bytes: float | None = None
    tdp_w: float | None = None
    hbm_bw_efficiency: float | None = None   # achievable fraction of hbm_bw_bytes_per_s (measured or AIC's 0.8)
    bf16_matmul_measured_flops_per_s: float | None = None  # a measured large BF16 GEMM, when published
    aliases: tuple[str, ...] = ()
    unsourced: tuple[str, ...] = field(default=())  # fields whose source says UNSOURCED

    @property
    def sm_number(self) -> int | None:
        """The NVIDIA compute capability as a number (sm_80 → 80, sm_100 → 100, sm_90a → 90); None for another
        vendor's name (gfx942)."""
        cc = str(self.compute_capability)
        digits = "".join(c for c in cc[3:] if c.isdigit()) if cc.startswith("sm_") else ""
        return int(digits) if digits else None

    @property
    def has_nvlink(self) -> bool:
        """True when GPUs talk over NVLink/XGMI rather than PCIe."""
        return self.nvlink_bw_bytes_per_s > 0

    def __repr__(self) -> str:
        return f"GpuSpec({self.name!r}: {self.display_name}, {self.sm_count} SMs, {self.interconnect})"


def normalize_name(name: str) -> str:
    """Lower case; runs of spaces, '-', '_', '.' and '/' become one '_' (so `H100-SXM` == `h100 sxm`)."""
    return re.sub(r"[\s\-_./]+", "_", name.strip().lower()).strip("_")


def parse_value_entry(path: str, key: str, table: Any) -> tuple[float | bool, str]:
    """One `[key]` table → (SI value, source). Exactly one `value*` key and a non-empty `source`."""
    if not isinstance(table, dict):
        raise BadConfig(f"{path}: [{key}] must be a table with a value_* key and a source")
    value_keys = [k for k in table if k.startswith("value")]
    source = table.get("source")
    if len(value_keys) != 1 or not isinstance(source, str) or not source.strip():
        raise BadConfig(f"{path}: [{key}] needs exactly one value_* key and a non-empty source")
    vkey = value_keys[0]
    raw = table[vkey]
    if vkey == "value":
        if not isinstance(raw, (bool, int, float)):
            raise BadConfig(f"{path}: [{key}] value must be a number or a boolean")
        return raw, source
    if vkey not in _CONVERTERS or isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise BadConfig(f"{path}: [{key}] has an unknown unit key or a non-number: {vkey} = {raw!r}")
    if raw < 0:
        raise BadConfig(f"{path}: [{key}] {vkey} is negative")
    return _CONVERTERS[vkey](float(raw)), source


def _read_toml(path: str, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadConfig(f"{path}: malformed TOML: {exc}") from exc


def parse_gpu_toml(path: str, text: str) -> GpuSpec:
    """Parse one GPU TOML document (its text; `path` names it in errors) into a `GpuSpec`."""
    doc = _read_toml(path, text)
    for key in _REQUIRED_STR:
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise BadConfig(f"{path}: missing string field '{key}'")
    values: dict[str, float | bool] = {}
    sources: dict[str, str] = {}
    for key in _REQUIRED_NUM + _OPTIONAL_NUM:
        if key in doc:
            values[key], sources[key] = parse_value_entry(path, key, doc[key])
        elif key in _REQUIRED_NUM:
            raise BadConfig(f"{path}: missing [{key}]")
    flops = doc.get("flops", {})
    if not isinstance(flops, dict) or "bf16" not in flops:
        raise BadConfig(f"{path}: missing [flops.bf16]")
    flops_per_s: dict[str, float] = {}
    for dtype, table in flops.items():
        if dtype not in DTYPES:
            raise BadConfig(f"{path}: unknown dtype [flops.{dtype}] (known: {', '.join(DTYPES)})")
        value, sources[f"flops.{dtype}"] = parse_value_entry(path, f"flops.{dtype}", table)
        flops_per_s[dtype] = float(value)
    return _assemble(path, doc, values, flops_per_s, sources)


def _opt_float(values: Mapping[str, float | bool], key: str) -> float | None:
    return float(values[key]) if key in values else None


def _assemble(
    path: str,
    doc: dict[str, Any],
    v: dict[str, float | bool],
    flops_per_s: dict[str, float],
    sources: dict[str, str],
) -> GpuSpec:
    if not isinstance(v["p2p"], bool):
        raise BadConfig(f"{path}: [p2p] value must be true or false")
    aliases = doc.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise BadConfig(f"{path}: 'aliases' must be a list of strings")
    threads = v.get("max_threads_per_sm")
    return GpuSpec(
        name=doc["name"], display_name=doc["display_name"], vendor=doc["vendor"],
        generation=doc["generation"], arch=doc["arch"], compute_capability=doc["compute_capability"],
        interconnect=doc["interconnect"], sm_count=int(v["sm_count"]), hbm_bytes=float(v["hbm"]),
        hbm_bw_bytes_per_s=float(v["hbm_bw"]), flops_per_s=flops_per_s, l2_bytes=float(v["l2"]),
        nvlink_bw_bytes_per_s=float(v["nvlink_bw"]), nvlink_domain_gpus=int(v["nvlink_domain"]),
        pcie_gen=int(v["pcie_gen"]), pcie_bw_bytes_per_s=float(v["pcie_bw"]), p2p=bool(v["p2p"]),
        sources=sources,
        max_threads_per_sm=None if threads is None else int(threads),
        smem_per_block_optin_bytes=_opt_float(v, "smem_per_block_optin"),
        tdp_w=_opt_float(v, "tdp"),
        hbm_bw_efficiency=_opt_float(v, "hbm_bw_efficiency"),
        bf16_matmul_measured_flops_per_s=_opt_float(v, "bf16_matmul_measured"),
        aliases=tuple(aliases),
        unsourced=tuple(sorted(k for k, s in sources.items() if "UNSOURCED" in s)),
    )


def _gpu_dir() -> Any:
    return tables.DATA / "gpus"


@cache
def _gpu_files() -> dict[str, Any]:
    """The bundled GPU files by canonical name (a file's name less `.toml`), sorted; none is read here."""
    entries = sorted(_gpu_dir().iterdir(), key=lambda e: e.name)
    return {e.name.removesuffix(".toml"): e for e in entries if e.name.endswith(".toml")}


# A table header (`[hbm]`, `[flops.bf16]`): the top-level keys (name, aliases, ...) all come before the first one.
_TABLE_LINE = re.compile(r"^[ \t]*\[", re.MULTILINE)


def _top_level(path: str, text: str) -> dict[str, Any]:
    """A GPU file's top-level keys: the text above its first table header parsed on its own (the whole document
    where that part does not parse alone, e.g. a multi-line value cut at a line that starts with `[`)."""
    if (m := _TABLE_LINE.search(text)) is not None:
        with contextlib.suppress(tomllib.TOMLDecodeError):
            return tomllib.loads(text[: m.start()])
    return _read_toml(path, text)


@cache
def _aliases() -> dict[str, str]:
    """Normalised alias → canonical name over every bundled GPU, from each file's top-level keys only (the number
    tables of the GPUs not asked for are not parsed: issue 30, start fast); an alias naming two GPUs, or a file
    whose `name` is not its file name, is a BadConfig."""
    aliases: dict[str, str] = {}
    for canonical, entry in _gpu_files().items():
        path, text = f"specs/data/gpus/{entry.name}", entry.read_text(encoding="utf-8")
        doc = _top_level(path, text)
        names = doc.get("aliases", [])
        if not isinstance(doc.get("name"), str) or not isinstance(names, list) or not all(
                isinstance(a, str) for a in names):
            parse_gpu_toml(path, text)  # raises the parser's own error for the field
        if doc["name"] != canonical:
            raise BadConfig(f"{path}: name '{doc['name']}' differs from the file name")
        for alias in (canonical, *names):
            key = normalize_name(alias)
            if aliases.get(key, canonical) != canonical:
                raise BadConfig(f"specs/data/gpus: alias '{alias}' names both {aliases[key]} and {canonical}")
            aliases[key] = canonical
    return aliases


@cache
def _spec(canonical: str) -> GpuSpec:
    """The bundled GPU of a canonical name, its file parsed and checked in full (once)."""
    entry = _gpu_files()[canonical]
    path = f"specs/data/gpus/{entry.name}"
    spec = parse_gpu_toml(path, entry.read_text(encoding="utf-8"))
    if spec.name != canonical:
        raise BadConfig(f"{path}: name '{spec.name}' differs from the file name")
    return spec


def list_gpus() -> list[str]:
    """Canonical names of the bundled GPUs, sorted."""
    return sorted(_gpu_files())


def resolve_gpu_name(name: str) -> str:
    """Canonical name for a name or alias (case, '-', '_' and spaces ignored; a trailing `_sxm`, as validation CSVs
    spell systems, is dropped when the name is not known with it); raises UnknownName. The one GPU-name resolver:
    the CLI, the model and the specs commands all resolve through it. A canonical name is its own file: no other
    file is read (`_aliases` refuses an alias that names another GPU's file)."""
    key = normalize_name(name)
    if key in _gpu_files():
        return key
    aliases = _aliases()
    for candidate in (key, key.removesuffix("_sxm")):
        if candidate in aliases:
            return aliases[candidate]
    import difflib  # only for an unknown name (~1 ms of imports every command would pay)

    near = difflib.get_close_matches(key, sorted(aliases), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(dict.fromkeys(aliases[n] for n in near))}? " if near else ""
    raise UnknownName(f"unknown GPU '{name}'; {hint}known: {', '.join(sorted(_gpu_files()))}")


def gpu_choice_note(name: str) -> str | None:
    """When a short name picks one of several bundled variants (`h100` → h100_sxm, with h100_pcie bundled too;
    `rtx pro 6000` → the Server Edition), what it was read as and the others; None for an exact or unique name."""
    key, canonical = normalize_name(name), resolve_gpu_name(name)
    if key == canonical:
        return None
    others = [g for g in sorted(_gpu_files()) if g != canonical and g.startswith(key + "_")]
    return f"{canonical} (also bundled: {', '.join(others)})" if others else None


def load_gpu(name: str) -> GpuSpec:
    """The bundled `GpuSpec` for a GPU name or alias; raises UnknownName listing the known names. Parses that
    GPU's file only (and, for an alias, the top-level keys of the others)."""
    return _spec(resolve_gpu_name(name))
