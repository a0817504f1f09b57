"""One engine file of specs/data/engines/ checked and folded into its releases: the schema, the refusal, the layering.

What it does: `parse(label, doc)` checks a parsed `<engine>.toml` (syntax in the header of vllm.toml) against the
schema below — only `[[release]]` entries, `since` a release number in strictly ascending order, only the sections
and keys listed, a source beside every value (its `<key>_source`, else the section's `source`), every value of
the right type, the first release setting every required key — and returns the releases with every value
carried forward (`Release.values`: section → key → `Sourced`), so that each release is complete. Anything else is
a BadConfig naming the file, the release and the key, at load: a file is never used in part.
`by_memory` reads the GPU-memory syntax ("70:256,inf:1024"), `capture_sizes` the capture-size syntax.
What it does not: pick a release for a version or build the records (specs/engines.py), or price anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from servescope.errors import BadConfig

SECTIONS = ("scheduler", "graphs", "memory", "overlap", "speculative")


def version_key(text: str) -> tuple[int, ...] | None:
    """'0.16.0' -> (0, 16); '1.2.0rc6.post1' -> (1, 2); 'nightly-…' or '' -> None. Trailing zeros are dropped, so
    that '0.4' and '0.4.0' are one release."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    if not m:
        return None
    parts = [int(x) for x in m.group(1).split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def by_memory(text: str) -> tuple[tuple[float, int], ...]:
    """'70:256,inf:1024' -> ((70.0, 256), (inf, 1024)): GiB bounds ascending, the last one inf (ValueError else)."""
    table = tuple((float(b), int(v)) for b, v in (item.split(":") for item in text.split(",")))
    bounds = [b for b, _ in table]
    if not table or bounds != sorted(set(bounds)) or not math.isinf(bounds[-1]) or min(v for _, v in table) < 1:
        raise ValueError(f"{text!r} is not 'GiB:value,...,inf:value' with ascending bounds and values >= 1")
    return table


def capture_sizes(text: str) -> tuple[int, ...]:
    """'1,2,4,8:256:8' -> (1, 2, 4, 8, 16, ..., 248): items are ints or start:stop:step ranges (ValueError else)."""
    out: list[int] = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        nums = [int(p) for p in item.split(":")]
        if len(nums) not in (1, 3) or min(nums) < 1:
            raise ValueError(f"capture size {item!r} is not an integer >= 1 or a start:stop:step range")
        out.extend(range(*nums) if len(nums) == 3 else nums)
    if not out:
        raise ValueError(f"{text!r} lists no capture size")
    return tuple(sorted(set(out)))


def _choice(*allowed: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in allowed:
            raise ValueError(f"{v!r}; known: {', '.join(allowed)}")
        return v
    return check


def _typed(kind: type) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        ok = isinstance(v, kind) and not (kind is not bool and isinstance(v, bool))
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if not ok:
            raise ValueError(f"{v!r} is not a {kind.__name__}")
        return v
    return check


def _share(v: Any) -> float:
    f = _typed(float)(v)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"{f} is not within (0, 1]")
    return float(f)


def _text_of(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        parse(_typed(str)(v))  # raises ValueError for a bad string
        return v
    return check


def _capabilities(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and re.fullmatch(r"sm_\d+", x) for x in v):
        raise ValueError(f"{v!r} is not a list of compute capabilities ('sm_120')")
    return tuple(v)


_INT, _BOOL, _FLOAT, _STR = _typed(int), _typed(bool), _typed(float), _typed(str)
# section -> key -> the check that returns the value as stored; OPTIONAL keys may be absent from every release
SCHEMA: dict[str, dict[str, Callable[[Any], Any]]] = {
    "scheduler": {"max_num_seqs": _text_of(by_memory), "max_num_batched_tokens": _text_of(by_memory),
                  "chunked_prefill": _BOOL, "priority": _choice("decode_first", "prefill_first"),
                  "admission": _choice("on_demand", "reserve_full", "reserve_ratio"),
                  "reserve_init_ratio": _FLOAT, "reserve_min_ratio": _FLOAT, "reserve_decay_steps": _FLOAT},
    "graphs": {"capture_sizes": _text_of(capture_sizes), "mixed_batches": _BOOL},
    "memory": {"kv_mem_fraction": _share, "kv_mem_of": _choice("total", "free"), "block_size_tokens": _INT},
    "overlap": {"enabled": _BOOL, "off_when": _choice("", "pp")},
    "speculative": {"graph_max_batch": _INT, "draft_loop_graphed": _BOOL, "first_forward_eager": _BOOL,
                    "eager_ops_per_draft_step": _INT, "eager_ops_per_iteration": _INT, "host_syncs": _INT,
                    "mla_verify_as_prefill_on": _capabilities},
}
OPTIONAL = {("memory", "kv_mem_fraction"), ("overlap", "off_when"), ("speculative", "mla_verify_as_prefill_on"),
            ("scheduler", "reserve_init_ratio"), ("scheduler", "reserve_min_ratio"),
            ("scheduler", "reserve_decay_steps")}
RESERVE_KEYS = ("reserve_init_ratio", "reserve_min_ratio", "reserve_decay_steps")


@dataclass(frozen=True)
class Sourced:
    """One default and where it comes from; `since` is the release whose entry set it."""

    value: Any
    source: str
    since: str


@dataclass(frozen=True)
class Release:
    """One `[[release]]` entry with every value carried forward from the releases before (complete)."""

    since: str
    values: Mapping[str, Mapping[str, Sourced]]  # section -> key -> value


def parse(label: str, doc: Mapping[str, Any]) -> tuple[Release, ...]:
    """The releases of one parsed engine file (module docstring); BadConfig naming `label` and the key."""
    if set(doc) != {"release"} or not isinstance(doc["release"], list) or not doc["release"]:
        extra = ", ".join(sorted(set(doc) - {"release"})) or "no [[release]] entries"
        raise BadConfig(f"{label}: only [[release]] entries are allowed ({extra})")
    out: list[Release] = []
    state: dict[str, dict[str, Sourced]] = {s: {} for s in SECTIONS}
    last: tuple[int, ...] | None = None
    for row in doc["release"]:
        since = _since(label, row, last)
        last = version_key(since)
        for section in SECTIONS:
            state[section].update(_section(f"{label} release {since} [{section}]", row.get(section, {}), section,
                                           since))
        _complete(f"{label} release {since}", state, first=not out)
        out.append(Release(since, {s: dict(v) for s, v in state.items()}))
    return tuple(out)


def _since(label: str, row: Any, last: tuple[int, ...] | None) -> str:
    if not isinstance(row, dict):
        raise BadConfig(f"{label}: a [[release]] entry is not a table")
    since = row.get("since")
    key = version_key(since) if isinstance(since, str) else None
    if key is None:
        raise BadConfig(f"{label}: since {since!r} is not a release number")
    if last is not None and key <= last:
        raise BadConfig(f"{label}: since {since!r} is out of order (releases ascending, each once)")
    unknown = sorted(set(row) - {"since", *SECTIONS})
    if unknown:
        raise BadConfig(f"{label} release {since}: unknown key {unknown[0]!r}; sections: {', '.join(SECTIONS)}")
    return str(since)


def _section(where: str, table: Any, section: str, since: str) -> dict[str, Sourced]:
    """The values one release's section sets, each checked and with its source."""
    if not isinstance(table, dict):
        raise BadConfig(f"{where}: not a table")
    known = SCHEMA[section]
    shared = table.get("source")
    if shared is not None and not (isinstance(shared, str) and shared.strip()):
        raise BadConfig(f"{where} source: not a non-empty string")
    out: dict[str, Sourced] = {}
    for key, value in table.items():
        if key == "source":
            continue
        base = key.removesuffix("_source")
        if key.endswith("_source"):
            if base not in table:
                raise BadConfig(f"{where} {key}: a source without its value {base!r}")
            if not (isinstance(value, str) and value.strip()):
                raise BadConfig(f"{where} {key}: not a non-empty string")
            continue
        if key not in known:
            raise BadConfig(f"{where}: unknown key {key!r}; known: {', '.join(known)}")
        source = table.get(f"{key}_source", shared)
        if source is None:
            raise BadConfig(f"{where} {key}: a value without a source ({key}_source or the section's source)")
        try:
            out[key] = Sourced(known[key](value), str(source), since)
        except ValueError as e:
            raise BadConfig(f"{where} {key}: {e}") from None
    return out


def _complete(where: str, state: Mapping[str, Mapping[str, Sourced]], first: bool) -> None:
    """Every required key set by now (the first release sets them all); reserve_ratio admission has its ratios."""
    for section, keys in SCHEMA.items():
        missing = [k for k in keys if k not in state[section] and (section, k) not in OPTIONAL]
        if missing:
            what = "the first release must set every value" if first else "missing"
            raise BadConfig(f"{where} [{section}] {missing[0]}: {what}")
    sched = state["scheduler"]
    if sched["admission"].value == "reserve_ratio" and not all(k in sched for k in RESERVE_KEYS):
        missing_r = next(k for k in RESERVE_KEYS if k not in sched)
        raise BadConfig(f"{where} [scheduler] {missing_r}: reserve_ratio admission needs it")
