"""Engine defaults by engine version: the one resolver (data: specs/data/engine_defaults.toml, a source per value).

What it does: `engine_defaults(backend, version)` returns the `EngineDefaults` an engine of that version runs with
(overlap scheduler, KV memory share and what it is a share of, the GPUs on which its MLA backend verifies
speculative tokens through the prefill path) — the newest entry whose `since` is at or below
the version; no version, or one newer than every entry, takes the newest entry; a version older than every entry
or one that does not parse takes the nearest entry and says so in `note` (the CLI prints it as a warning).
What it does not: price anything (perfmodel/ reads these fields) or know about versions the data does not list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from servescope.errors import BadConfig
from servescope.specs import tables


@dataclass(frozen=True)
class EngineDefaults:
    backend: str
    version: str  # the engine version asked for ("" = none given)
    since: str  # the data entry that applies
    overlap_scheduler: bool
    kv_mem_fraction: float | None  # None: no sourced default (the memory model's generic share stands in)
    kv_mem_of: str  # "total" | "free"
    overlap_off_when: tuple[str, ...]  # e.g. ("pp",): the engine turns the overlap off by itself there
    sources: dict[str, str]
    note: str = ""  # non-empty when the version was not in the data's range (said as a warning)
    # GPU compute capabilities ("sm_120") on which the default MLA backend runs a speculative verify block through
    # its MLA prefill path (engine_defaults.toml mla_verify_as_prefill_on)
    mla_verify_as_prefill_on: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """'vllm 0.16.0 (defaults of 0.14.0+)' or 'vllm (newest defaults: 0.14.0+)'."""
        if not self.version:
            return f"{self.backend} (newest defaults in the data: {self.since}+)"
        return f"{self.backend} {self.version} (defaults of {self.since}+)"


def version_key(text: str) -> tuple[int, ...] | None:
    """'0.16.0' -> (0, 16, 0); '1.2.0rc6.post1' -> (1, 2, 0); 'nightly-…' or '' -> None."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


@lru_cache(maxsize=1)
def _entries() -> dict[str, list[dict[str, object]]]:
    doc = tables.engine_defaults()
    out: dict[str, list[dict[str, object]]] = {}
    for backend, rows in doc.items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "since" in r for r in rows):
            raise BadConfig(f"specs/data/engine_defaults.toml [[{backend}]]: every entry needs a `since` version")
        out[backend] = sorted(rows, key=lambda r: version_key(str(r["since"])) or (0,))
    return out


def known_versions(backend: str) -> list[str]:
    """The `since` versions the data lists for an engine, oldest first."""
    return [str(r["since"]) for r in _entries().get(backend, [])]


@lru_cache(maxsize=256)
def engine_defaults(backend: str, version: str = "") -> EngineDefaults:
    """The defaults an engine of `version` runs with (module docstring); BadConfig for an engine not in the data."""
    rows = _entries().get(backend)
    if not rows:
        raise BadConfig(f"specs/data/engine_defaults.toml: no entries for engine {backend!r}")
    key, note = version_key(version) if version else None, ""
    if version and key is None:
        row = rows[-1]
        note = (f"engine version {version!r} is not a release number: using the newest {backend} defaults in the "
                f"data ({row['since']}+; known: {', '.join(known_versions(backend))})")
    elif key is None:
        row = rows[-1]
    else:
        older = [r for r in rows if (version_key(str(r["since"])) or (0,)) <= key]
        row = older[-1] if older else rows[0]
        if not older:
            note = (f"{backend} {version} is older than every entry in the data: using the defaults of "
                    f"{row['since']} (known: {', '.join(known_versions(backend))})")
    return _build(backend, version, row, note)


def _build(backend: str, version: str, row: dict[str, object], note: str) -> EngineDefaults:
    try:
        frac = row.get("kv_mem_fraction")
        fraction = None if frac is None else float(str(frac))
        of = str(row.get("kv_mem_of", "total"))
        off = str(row.get("overlap_off_when", ""))
        verify = row.get("mla_verify_as_prefill_on", [])
        if not isinstance(verify, list) or not all(isinstance(x, str) for x in verify):
            raise ValueError(f"mla_verify_as_prefill_on {verify!r} is not a list of compute capabilities")
        if of not in ("total", "free") or (fraction is not None and not 0.0 < fraction <= 1.0):
            raise ValueError(f"kv_mem_of {of!r} / kv_mem_fraction {fraction}")
        return EngineDefaults(
            backend=backend, version=version, since=str(row["since"]), overlap_scheduler=bool(row["overlap_scheduler"]),
            kv_mem_fraction=fraction, kv_mem_of=of, overlap_off_when=tuple(x for x in off.split(",") if x),
            sources={k[: -len("_source")]: str(v) for k, v in row.items() if k.endswith("_source")}, note=note,
            mla_verify_as_prefill_on=tuple(verify))
    except (KeyError, ValueError) as e:
        raise BadConfig(f"specs/data/engine_defaults.toml [[{backend}]] since {row.get('since')}: {e}") from None
