"""Per-rank summary cache for rank folders: one Parquet file per input folder, in a cache folder the caller names.

Does: keep, for each rank file analysed, the outcome of its analysis (`ranks.RankOutcome`: breakdown, warnings, or
why it failed) so that a second run over the same folder — or a diff of two captures — analyses only the files that
changed. A cached row is used when the file's resolved path, size, mtime_ns, the servescope version and the options
that change a result (`--top`) all match; everything else is analysed again and the cache file rewritten (to a
temporary name, then renamed: a run that dies leaves the old cache whole). Columns: the key (path, size_bytes,
mtime_ns, version, options), a per-rank summary a reader can query with Polars alone (rank, device, steps, gpu_busy_us,
gpu_span_us, comm_us, error), the warnings, and the breakdown itself, msgpack-encoded by its types (msgspec) and
deflated (its kernel names repeat: ~240 KB → ~22 KB a rank on HTA's sampled ranks, so a thousand ranks' cache is held
and written in tens of MB), so a cached outcome equals a fresh one field for field. A cache file that cannot be read, is not of this layout, or comes
from another servescope version is ignored and rebuilt, with a warning (`caching` collects them for the CLI).
Where: `servescope trace FOLDER --cache DIR` (or `diff A B --cache DIR`) names DIR; the file is
DIR/ranks-<sha256 of the folder's path and the options>.parquet.
servescope never writes next to its inputs (they may be read-only, shared, or another team's capture), and the cache
is opt-in: during development the version does not change when the analysis does, so a default cache would serve
answers from older code.
Does not: analyse (analysis.ranks does, and calls `Lookup`/`store` around its runners), cache a single trace file
(a rank folder's cache: one file is simply read again) or a run that uses `--capture` (its shapes change results), or notice a file rewritten with the same size within one mtime tick.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from servescope import errors
from servescope.analysis.breakdown import COMMUNICATION, TraceBreakdown
from servescope.analysis.rank_outcome import RankOutcome

SCHEMA: dict[str, Any] = {
    "path": pl.String, "size_bytes": pl.Int64, "mtime_ns": pl.Int64, "version": pl.String, "options": pl.String,
    "outcomes_in_file": pl.Int32, "rank": pl.Int64, "device": pl.String, "steps": pl.Int32,
    "gpu_busy_us": pl.Float64, "gpu_span_us": pl.Float64, "comm_us": pl.Float64, "error_type": pl.String,
    "error": pl.String, "warnings": pl.List(pl.String), "breakdown": pl.Binary,
}
try:  # the installed distribution's (servescope/__init__ imports every stage: analysis may not import it)
    VERSION = version("servescope")
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "unknown"
Key = tuple[int, int, str]  # (size_bytes, mtime_ns, options) of one resolved path


@dataclass
class CacheUse:
    """The cache folder of a run and what it says: hits, misses and warnings (a damaged or outdated cache)."""

    folder: Path
    hits: int = 0
    misses: int = 0
    warnings: list[str] = field(default_factory=list)


_IN_USE: ContextVar[CacheUse | None] = ContextVar("servescope_rank_cache", default=None)


@contextmanager
def caching(folder: str | Path | None) -> Iterator[CacheUse | None]:
    """Rank folders analysed inside this block use the cache in `folder` (None: no cache); yields what it did."""
    use = None if folder is None else CacheUse(Path(folder))
    token = _IN_USE.set(use)
    try:
        yield use
    finally:
        _IN_USE.reset(token)


def in_use() -> CacheUse | None:
    return _IN_USE.get()


def file_key(path: str, options: str) -> tuple[str, Key]:
    """(resolved path, (size, mtime_ns, options)) of a rank file; a file that cannot be stat'ed gets a key that
    matches nothing (the analysis then says what is wrong with it)."""
    resolved = os.path.realpath(path)
    try:
        st = os.stat(resolved)
    except OSError:
        return resolved, (-1, -1, options)
    return resolved, (st.st_size, st.st_mtime_ns, options)


def cache_file(folder: Path, files: Sequence[str], options: str) -> Path:
    """DIR/ranks-<digest>.parquet: one cache file per set of input folders (a rank folder: its own path) and options
    (so that `trace` and `diff`, which keeps every kernel, each keep theirs)."""
    parents = sorted({os.path.dirname(os.path.realpath(f)) for f in files})
    digest = hashlib.sha256("\0".join([*parents, options]).encode()).hexdigest()[:16]
    return folder / f"ranks-{digest}.parquet"


# --- reading -------------------------------------------------------------------------------------------------------


def _error(kind: str | None, message: str | None) -> errors.TraceError | None:
    if message is None:
        return None
    cls = getattr(errors, kind or "", None)
    return (cls if isinstance(cls, type) and issubclass(cls, errors.TraceError) else errors.TraceError)(message)


Rows = list[dict[str, Any]]
_DAMAGE = (OSError, pl.exceptions.PolarsError, msgspec.DecodeError, zlib.error, KeyError, TypeError, ValueError)


def _outcomes(rows: Rows, file: str, decoder: msgspec.msgpack.Decoder[TraceBreakdown]) -> list[RankOutcome]:
    """One file's cached outcomes, named as this run names the file."""
    out = []
    for r in rows:
        if r["outcomes_in_file"] == 0:
            continue
        b = None if r["breakdown"] is None else decoder.decode(zlib.decompress(r["breakdown"]))
        out.append(RankOutcome(file, r["rank"], None if b is None else _named(b, file), tuple(r["warnings"] or ()),
                               _error(r["error_type"], r["error"])))
    return out


def _named(b: TraceBreakdown, file: str) -> TraceBreakdown:
    """The cache keys the resolved path; a run may reach the same file by another path."""
    return b if b.file == file else replace(b, file=file)


def _damaged(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"damaged ({text[0] if text else type(exc).__name__})"


def _read(path: Path) -> tuple[dict[str, tuple[Key, Rows]], str | None]:
    """{resolved path: (key, its rows)} and why the file was ignored (None when it was used). The breakdowns stay
    encoded: only the ones a run uses are decoded (`Lookup`), each compacted by the caller as it comes."""
    try:
        frame = pl.read_parquet(path)
        if dict(frame.schema) != SCHEMA:
            return {}, "not a servescope rank cache (its columns differ)"
        versions = set(frame["version"].unique().to_list())
        if versions and versions != {VERSION}:
            return {}, f"written by servescope {', '.join(sorted(map(str, versions)))}, this is {VERSION}"
        by_path: dict[str, Rows] = {}
        for row in frame.iter_rows(named=True):
            by_path.setdefault(row["path"], []).append(row)
        return {p: ((rows[0]["size_bytes"], rows[0]["mtime_ns"], rows[0]["options"]), rows)
                for p, rows in by_path.items()}, None
    except FileNotFoundError:
        return {}, None
    except _DAMAGE as exc:
        return {}, _damaged(exc)


# --- writing -------------------------------------------------------------------------------------------------------


def _rows(path: str, key: Key, outcomes: Sequence[RankOutcome]) -> Rows:
    base: dict[str, Any] = {"path": path, "size_bytes": key[0], "mtime_ns": key[1], "version": VERSION, "options": key[2],
            "outcomes_in_file": len(outcomes)}
    empty: dict[str, Any] = {"rank": None, "device": None, "steps": None, "gpu_busy_us": None, "gpu_span_us": None, "comm_us": None,
             "error_type": None, "error": None, "warnings": [], "breakdown": None}
    rows: Rows = [] if outcomes else [{**base, **empty}]
    for o in outcomes:
        b = o.breakdown
        row = {**base, **empty, "rank": o.rank, "warnings": list(o.warnings)}
        if o.error is not None:
            row.update(error_type=type(o.error).__name__, error=str(o.error))
        if b is not None:
            row.update(device=b.device_name, steps=len(b.steps), gpu_busy_us=sum(s.gpu_busy_us for s in b.steps),
                       gpu_span_us=sum(s.gpu_span_us for s in b.steps),
                       comm_us=sum(s.classes_us.get(COMMUNICATION, 0.0) for s in b.steps),
                       breakdown=zlib.compress(msgspec.msgpack.encode(b), 1))
        rows.append(row)
    return rows


def _write(path: Path, rows: Rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pl.DataFrame(rows, schema=SCHEMA).write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class Lookup:
    """One run's view of the cache: which files it holds (`cached`), which must be analysed (`missing`); `store`
    puts the fresh outcomes in and rewrites the cache file when anything changed (the cached files' rows as read)."""

    def __init__(self, use: CacheUse, files: Sequence[str], options: str,
                 keep: Callable[[list[RankOutcome]], list[RankOutcome]] = list) -> None:
        self.use, self.path = use, cache_file(use.folder, files, options)
        self.keys = [file_key(f, options) for f in files]
        stored, problem = _read(self.path)
        self.cached: dict[int, list[RankOutcome]] = {}
        self._rows: dict[int, Rows] = {}
        decoder = msgspec.msgpack.Decoder(TraceBreakdown)
        try:
            for i, (path, key) in enumerate(self.keys):
                hit = stored.get(path)
                if hit is not None and hit[0] == key and key[0] >= 0:
                    self.cached[i], self._rows[i] = keep(_outcomes(hit[1], files[i], decoder)), hit[1]
        except _DAMAGE as exc:  # a breakdown that does not decode: the whole file is suspect
            stored, problem, self.cached, self._rows = {}, _damaged(exc), {}, {}
        if problem is not None:
            use.warnings.append(f"rank cache {self.path}: {problem}; ignored and rebuilt")
        self.missing = [i for i in range(len(files)) if i not in self.cached]
        self._dirty = problem is not None or bool(self.missing) or set(stored) != {p for p, _ in self.keys}
        use.hits += len(self.cached)
        use.misses += len(self.missing)

    def store(self, fresh: dict[int, list[RankOutcome]]) -> None:
        """Write the cache with the cached and `fresh` outcomes of this run's files (files gone are dropped)."""
        if not self._dirty:
            return
        rows = [r for i, (p, key) in enumerate(self.keys) if key[0] >= 0
                for r in (self._rows[i] if i in self._rows else _rows(p, key, fresh[i]))]
        try:
            _write(self.path, rows)
        except OSError as exc:
            self.use.warnings.append(f"rank cache {self.path}: cannot write it ({exc.strerror or exc}); "
                                     "results not cached")
