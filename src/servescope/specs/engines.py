"""The one engine registry: each serving engine's defaults by release and GPU memory, a source per value.

Data: specs/data/engines/<engine>.toml, one file per engine (`[[release]]` entries with `since`, each listing what
changed in that release; syntax and key meanings in the header of vllm.toml; checked by specs/engine_file.py).
What it does: `ENGINES` — the engine names, from the file names (the default engine first, `DEFAULT_ENGINE`);
`engine(backend, version, hbm_bytes)` — the `Engine` an engine of that version runs with on a GPU of that memory:
the newest release whose `since` is at or below the version; no version, or one newer than every entry, takes the
newest; a version older than every entry or one that does not parse takes the nearest and says so in `note` (the
CLI prints it as a warning). The record has one sub-record per section (scheduler, graphs, memory, overlap,
speculative), each with the resolved values and `sources` (key → where it comes from). The closed form
(perfmodel/serving.py, graphs.py, step.py, memory), the simulation (simulate/engine.py) and the speculative
iteration (perfmodel/speculative.py) all read this one record, so that they price the same prompt the same way.
What it does not: price anything, or know about releases the files do not list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from types import MappingProxyType
from typing import Any

from servescope.errors import BadConfig
from servescope.specs import tables
from servescope.specs.engine_file import (
    Release,
    Sourced,
    by_memory,
    capture_sizes,
    parse,
    version_key,
)
from servescope.units import bytes_to_gib

__all__ = ["DEFAULT_ENGINE", "ENGINES", "Engine", "engine", "known_versions", "releases", "value_since",
           "version_key"]

DEFAULT_ENGINE = tables.DEFAULT_ENGINE  # the engine a scenario runs when none is named (--backend's default)


@dataclass(frozen=True)
class Scheduler:
    """How the engine forms a step (meanings: vllm.toml header). max_num_seqs and max_num_batched_tokens are the
    values for the GPU memory the record was resolved for."""

    max_num_seqs: int
    max_num_batched_tokens: int  # the prompt budget: tokens one step takes (chunk size under chunked prefill)
    chunked_prefill: bool
    priority: str  # "decode_first" | "prefill_first"
    admission: str  # "on_demand" | "reserve_full" | "reserve_ratio"
    reserve_init_ratio: float
    reserve_min_ratio: float
    reserve_decay_steps: float
    sources: Mapping[str, str] = field(repr=False)

    @property
    def lockstep_waves(self) -> bool:
        """A step is all prefill or all decode (prefill first): a closed loop's waves stay synchronised."""
        return self.priority == "prefill_first"


@dataclass(frozen=True)
class Graphs:
    capture_sizes: tuple[int, ...]  # captured decode batch sizes, tokens per rank, ascending
    mixed_batches: bool  # mixed prefill+decode steps within the capture range run as (piecewise) graphs
    sources: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class Memory:
    kv_mem_fraction: float | None  # None: no sourced default (the memory model's generic share stands in)
    kv_mem_of: str  # "total" | "free"
    block_size_tokens: int
    sources: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class Overlap:
    enabled: bool  # the default scheduler prepares step n+1 on the CPU while the GPU runs step n
    off_when: tuple[str, ...]  # e.g. ("pp",): the engine turns the overlap off by itself there
    sources: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class Speculative:
    """How the engine runs a speculative iteration (perfmodel/speculative.py)."""

    graph_max_batch: int  # 0 = the engine's ordinary capture sizes (padded); else exact sizes 1..n, eager above
    draft_loop_graphed: bool
    first_forward_eager: bool
    eager_ops_per_draft_step: int
    eager_ops_per_iteration: int
    host_syncs: int
    mla_verify_as_prefill_on: tuple[str, ...]  # compute capabilities ("sm_120"); () = the decode kernel
    sources: Mapping[str, str] = field(repr=False)

    @property
    def source(self) -> str:
        """Where the iteration's counts come from (the source of eager_ops_per_iteration)."""
        return self.sources["eager_ops_per_iteration"]


@dataclass(frozen=True)
class Engine:
    """The defaults one engine version runs with on a GPU of `hbm_bytes` (module docstring)."""

    backend: str
    version: str  # the engine version asked for ("" = none given)
    since: str  # the release entry that applies
    hbm_bytes: float
    scheduler: Scheduler
    graphs: Graphs
    memory: Memory
    overlap: Overlap
    speculative: Speculative
    note: str = ""  # non-empty when the version was not in the data's range (said as a warning)

    @property
    def label(self) -> str:
        """'vllm 0.16.0 (defaults of 0.14.0+)' or 'vllm (newest defaults in the data: 0.14.0+)'."""
        if not self.version:
            return f"{self.backend} (newest defaults in the data: {self.since}+)"
        return f"{self.backend} {self.version} (defaults of {self.since}+)"

    def source(self, section: str, key: str) -> str:
        """Where one value comes from; KeyError for a key the section does not have."""
        return str(getattr(self, section).sources[key])


ENGINES: tuple[str, ...] = tables.engines_in_order()  # the default engine first


@cache
def _parsed(backend: str) -> tuple[Release, ...]:
    """One engine's file, parsed and checked (engine_file.parse): only the engines a command asks for are read."""
    return parse(f"specs/data/engines/{backend}.toml", tables.engine_file(backend))


def releases(backend: str) -> tuple[Release, ...]:
    """Every release entry of an engine, oldest first, each complete (engine_file.Release)."""
    rows = _parsed(backend) if backend in ENGINES else ()
    if not rows:
        raise BadConfig(f"specs/data/engines/: no file for engine {backend!r}; known: {', '.join(ENGINES)}")
    return rows


def known_versions(backend: str) -> list[str]:
    """The `since` versions the data lists for an engine, oldest first."""
    return [r.since for r in releases(backend)]


@lru_cache(maxsize=512)
def engine(backend: str, version: str = "", hbm_bytes: float = 0.0) -> Engine:
    """The defaults an engine of `version` runs with on a GPU of `hbm_bytes` (module docstring; 0, the default:
    the smallest memory tier — pass the GPU's memory wherever a by-memory value is read); BadConfig for an engine
    with no file."""
    row, note = _release_for(backend, version)
    return _build(backend, version, row, float(hbm_bytes), note)


def value_since(backend: str, section: str, key: str, version: str = "") -> str:
    """The release whose entry set the value an engine of `version` (default: the newest) runs with, e.g.
    ("vllm", "overlap", "enabled") -> "0.14.0": for texts that name the release, instead of writing it by hand."""
    row, _ = _release_for(backend, version)
    item = row.values[section].get(key)
    if item is None:
        raise BadConfig(f"specs/data/engines/{backend}.toml: no {section}.{key} in release {row.since}")
    return item.since


def _release_for(backend: str, version: str) -> tuple[Release, str]:
    """The release entry a version takes and the note when it is out of the data's range (module docstring)."""
    rows = releases(backend)
    key = version_key(version) if version else None
    known = ", ".join(known_versions(backend))
    if version and key is None:
        return rows[-1], (f"engine version {version!r} is not a release number: using the newest {backend} "
                          f"defaults in the data ({rows[-1].since}+; known: {known})")
    if key is None:
        return rows[-1], ""
    older = [r for r in rows if (version_key(r.since) or ()) <= key]
    if older:
        return older[-1], ""
    return rows[0], (f"{backend} {version} is older than every entry in the data: using the defaults of "
                     f"{rows[0].since} (known: {known})")


def _by_memory(item: Sourced, hbm_bytes: float) -> int:
    gib = bytes_to_gib(hbm_bytes)
    table = by_memory(str(item.value))
    return next((v for bound, v in table if gib < bound), table[-1][1])


def _sources(values: Mapping[str, Sourced]) -> Mapping[str, str]:
    return MappingProxyType({k: v.source for k, v in values.items()})


def _build(backend: str, version: str, row: Release, hbm_bytes: float, note: str) -> Engine:
    v: Mapping[str, Mapping[str, Sourced]] = row.values

    def get(section: str, key: str, default: Any = None) -> Any:
        item = v[section].get(key)
        return default if item is None else item.value

    s = v["scheduler"]
    sched = Scheduler(
        _by_memory(s["max_num_seqs"], hbm_bytes), _by_memory(s["max_num_batched_tokens"], hbm_bytes),
        get("scheduler", "chunked_prefill"), get("scheduler", "priority"), get("scheduler", "admission"),
        float(get("scheduler", "reserve_init_ratio", 0.0)), float(get("scheduler", "reserve_min_ratio", 0.0)),
        float(get("scheduler", "reserve_decay_steps", 1.0)), _sources(s))
    graphs = Graphs(capture_sizes(get("graphs", "capture_sizes")), get("graphs", "mixed_batches"),
                    _sources(v["graphs"]))
    frac = get("memory", "kv_mem_fraction")
    memory = Memory(None if frac is None else float(frac), get("memory", "kv_mem_of"),
                    get("memory", "block_size_tokens"), _sources(v["memory"]))
    off = str(get("overlap", "off_when", ""))
    overlap = Overlap(get("overlap", "enabled"), tuple(x for x in off.split(",") if x), _sources(v["overlap"]))
    p = "speculative"
    spec = Speculative(get(p, "graph_max_batch"), get(p, "draft_loop_graphed"), get(p, "first_forward_eager"),
                       get(p, "eager_ops_per_draft_step"), get(p, "eager_ops_per_iteration"), get(p, "host_syncs"),
                       tuple(get(p, "mla_verify_as_prefill_on", ())), _sources(v[p]))
    return Engine(backend, version, row.since, hbm_bytes, sched, graphs, memory, overlap, spec, note)
