"""Rank folders at scale: analyse each rank file in its own worker (processes or Ray tasks), then compare ranks.

Does: `analyze_rank_files` runs load → classify → steps → breakdown for each file — in-process for one file,
in worker processes by default for several (`rank_workers.RankPool`: forked when the caller started it before
importing Polars, as the CLI does, else spawned; each worker returns a small `TraceBreakdown`, never an events
table), or as Ray tasks (`ray_address`: "local" starts a local Ray instance of its own, anything else
is a cluster address; the files must be readable at the same path on every node). Results come back in file
order, so every runner gives the same answer. A file that fails — unreadable, or any surprise in its analysis — is
one outcome with its error (a line in the report), never the run. Results are compacted as they arrive
(`SharedStrings`: one copy of each kernel name across ranks), so a thousand ranks hold ~0.085 MB each next to one
file's working set; inside `without_timelines()` (the `trace` command: no report of it shows a timeline) each
rank's timelines are dropped as it arrives, and ~0.03 MB a rank is left: its numbers (the cache of such a run is a
file of its own: its options say so). Inside `rank_cache.caching(DIR)` only the files the per-rank cache does not
hold are analysed (`_cached_run`; analysis/rank_cache.py). `cross_rank_view` reduces the per-rank breakdowns to the
compact comparison: GPU busy per rank, the spread of step time and the slowest rank per common step, and per
collective the spread of time spent in it (a rank that spends longer in a collective waited there).
`group_warnings` folds identical causes from several files into one line.
Does not: decide what is a finding (findings.py), print, or format.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from statistics import median

from servescope.analysis.breakdown import (
    COMMUNICATION,
    KernelStats,
    TraceBreakdown,
    breakdown_taking,
)
from servescope.analysis.rank_outcome import RankOutcome
from servescope.analysis.rank_workers import RankPool, parallel_workers
from servescope.analysis.ray_tasks import run_on_ray
from servescope.analysis.roofline import CaptureWork
from servescope.errors import ServescopeError, TraceError, TraceNotFound
from servescope.progress import report, stage
from servescope.trace.folder import DUPLICATE_RANK_NOTE, rank_from_name, ranks_from_names
from servescope.trace.load import load_rank_file


def analyze_rank_file(path: str, top_n: int = 10, capture: CaptureWork | None = None) -> list[RankOutcome]:
    """One rank file → the outcome of each rank it holds: one for a Kineto file, one per (process, GPU) for an
    Nsight Systems export of several processes (`trace.nsys.split_gpu_processes`). Not-a-trace / empty files
    come back as one outcome with `error` set, and so does any other trace error or unexpected exception while it is
    analysed (one damaged rank of a thousand is a line in the report, never the run); a missing file and non-trace
    servescope errors propagate (the caller's mistake, not one rank's damage). `capture`: shapes for graph-replayed kernels (analysis.capture)."""
    outcomes: list[RankOutcome] = []
    try:
        with stage("load"):
            traces = load_rank_file(path)
        while traces:  # each trace handed to its breakdown, which frees its table as it goes (breakdown_taking)
            rank, warnings, has_gpu = traces[0].rank, traces[0].warnings, traces[0].has_gpu_events
            outcomes.append(RankOutcome(path, rank, breakdown_taking(traces, top_n, capture) if has_gpu else None,
                                        warnings))
            if not has_gpu:
                traces.pop(0)
    except TraceNotFound:
        raise
    except ServescopeError as exc:
        if not isinstance(exc, TraceError):
            raise  # a spec or option error is the run's, not this rank's
        return [*outcomes, _failed(path, exc)]
    except Exception as exc:  # noqa: BLE001 - one rank's surprise must not sink a folder of a thousand
        return [*outcomes, _failed(path, TraceError(f"{path}: analysis failed ({type(exc).__name__}: "
                                                      f"{_first_line(exc)})"))]
    return outcomes


def _failed(path: str, exc: TraceError) -> RankOutcome:
    return RankOutcome(path, rank_from_name(Path(path).name), None, (), exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no message"


RankFn = Callable[[str, int], list[RankOutcome]]
FILES_DONE = "rank files"  # servescope.progress: files of a folder analysed (a single file reports nothing)


_NO_TIMELINES: ContextVar[bool] = ContextVar("servescope_rank_timelines_dropped", default=False)


@contextmanager
def without_timelines() -> Iterator[None]:
    """Rank folders analysed inside this block keep no timelines (`TraceBreakdown.timelines` is empty): for a
    caller that shows none (`servescope trace`), so that a thousand ranks hold their numbers, not their kernels."""
    token = _NO_TIMELINES.set(True)
    try:
        yield
    finally:
        _NO_TIMELINES.reset(token)


class SharedStrings:
    """Keeps one copy of each kernel name, class and collective across the ranks of a run. A breakdown from
    another process, Ray or Polars holds its own copies of strings that every rank shares; its timelines (every
    kernel of one representative step per kind) are most of its size: ~360 KB a rank on HTA's sampled ranks, ~85 KB
    with the strings shared, so a thousand ranks keep ~0.1 GB, not ~0.4 GB. Equal values; nothing mutated.
    The top kernels' names are shared too; `timelines=False` (`without_timelines`) drops the timelines instead:
    ~56 KB a rank is left as it arrives, ~30 KB once its strings are shared (HTA's sampled ranks)."""

    def __init__(self, timelines: bool = True) -> None:
        self.memo: dict[str, str] = {}
        self.timelines = timelines

    def _names(self, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple([self.memo.setdefault(v, v) for v in values])

    def _maybe(self, values: tuple[str | None, ...]) -> tuple[str | None, ...]:
        return tuple([None if v is None else self.memo.setdefault(v, v) for v in values])

    def _one(self, value: str | None) -> str | None:
        return None if value is None else self.memo.setdefault(value, value)

    def _kernels(self, top: tuple[KernelStats, ...]) -> tuple[KernelStats, ...]:
        # KernelStats(**fields) is dataclasses.replace without its per-field checks: ~3× faster over the ~30 top
        # kernels of every rank (all of KernelStats' fields are __init__ arguments)
        return tuple([KernelStats(**{**vars(k), "name": self.memo.setdefault(k.name, k.name),
                                     "kernel_class": self.memo.setdefault(k.kernel_class, k.kernel_class),
                                     "collective": self._one(k.collective), "no_shape": self._one(k.no_shape)})
                      for k in top])

    def _breakdown(self, b: TraceBreakdown) -> TraceBreakdown:
        """The top kernels' strings shared too (their names are half of what a rank holds without timelines)."""
        steps = tuple([replace(s, top_kernels=self._kernels(s.top_kernels)) for s in b.steps])
        kinds = tuple([replace(k, top_kernels=self._kernels(k.top_kernels), unshaped_kernels=tuple(
            [(self.memo.setdefault(n, n), self.memo.setdefault(why, why), us) for n, why, us in k.unshaped_kernels]))
            for k in b.kinds])
        if not self.timelines:
            return replace(b, steps=steps, kinds=kinds, timelines=())
        return replace(b, steps=steps, kinds=kinds, timelines=tuple(
            replace(t, name=self._names(t.name), kernel_class=self._names(t.kernel_class),
                    collective=self._maybe(t.collective)) for t in b.timelines))

    def __call__(self, outcomes: list[RankOutcome]) -> list[RankOutcome]:
        return [o if o.breakdown is None else replace(o, breakdown=self._breakdown(o.breakdown)) for o in outcomes]


def _in_process(names: list[str], top_n: int, fn: RankFn, keep: SharedStrings) -> list[list[RankOutcome]]:
    out = []
    for name in names:
        out.append(keep(fn(name, top_n)))
        if len(names) > 1:
            report(FILES_DONE, len(out), len(names))
    return out


def _run_processes(files: Sequence[str], top_n: int, pool: RankPool, fn: RankFn,
                   keep: SharedStrings) -> list[list[RankOutcome]]:
    """The pool's `size` − 1 processes plus this one, which starts on the first file at once (no wait for a
    worker to start) and takes files from the front while the workers take them from the back, each worker kept
    two files deep."""
    todo, results, deep = deque(range(len(files))), {}, 2 * (pool.size - 1)
    running: dict[Future[list[RankOutcome]], int] = {}

    def feed() -> None:
        while len(todo) > 1 and len(running) < deep:
            i = todo.pop()
            running[pool.submit(fn, files[i], top_n)] = i

    feed()
    while todo:
        i = todo.popleft()
        results[i] = keep(fn(files[i], top_n))
        for future in [f for f in running if f.done()]:
            results[running.pop(future)] = keep(future.result())
        report(FILES_DONE, len(results), len(files))
        feed()
    for future in as_completed(running):
        results[running[future]] = keep(future.result())
        report(FILES_DONE, len(results), len(files))
    return [results[i] for i in range(len(files))]


# Ray, local-only and bounded (servescope never uses the network): usage reporting off in every Ray process;
# for a local Ray the node address is loopback (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 is Ray's switch for "this
# node only": its node-IP lookup otherwise opens a UDP socket towards 8.8.8.8), RAY_ADDRESS is ignored, and the
# API server's cloud probe (usage_lib.get_cluster_config_to_report, run even with usage stats off: HTTP to
# 169.254.169.254 and metadata.google.internal) goes to a proxy on loopback that refuses at once. Start-up and a
# first task each have a deadline: a Ray that cannot start or answer is one line, not a hang.
def analyze_rank_files(
    files: Sequence[str | Path], top_n: int = 10, workers: int | RankPool | None = None,
    ray_address: str | None = None, capture: CaptureWork | None = None,
) -> list[RankOutcome]:
    """Outcomes in the order of `files` (an Nsight export of several GPU processes gives one per GPU). `workers`: processes (default: one per core; 1 = in-process), or a
    started RankPool (the CLI starts one before it imports Polars, so that its workers fork; the caller shuts
    it down); `ray_address`: run on Ray instead ("local" or a cluster address). By default, folders under
    rank_workers.PARALLEL_MIN_BYTES run in-process."""
    names = [str(f) for f in files]
    # a module-level function or its partial: both pickle to worker processes and Ray tasks
    fn: RankFn = analyze_rank_file if capture is None else partial(analyze_rank_file, capture=capture)
    return [o for per_file in _cached_run(names, top_n, workers, ray_address, fn, capture is None) for o in per_file]


def _cached_run(names: list[str], top_n: int, workers: int | RankPool | None, ray_address: str | None,
                fn: RankFn, cacheable: bool) -> list[list[RankOutcome]]:
    """`_run` on the files the rank cache does not hold (all of them without a cache, `rank_cache.caching`, and for
    a single file: nothing is written for one trace)."""
    from servescope.analysis import rank_cache  # lazy: Parquet/msgspec only when a cache is named

    timelines = not _NO_TIMELINES.get()
    use, keep = rank_cache.in_use(), SharedStrings(timelines)
    if use is None or not cacheable or len(names) < 2:  # a rank folder's cache: a single file is read again
        return _run(names, top_n, workers, ray_address, fn, keep)
    # a run without timelines caches none: its own cache file (the options name it), so a hit equals a fresh outcome
    options = f"top_n={top_n}" if timelines else f"top_n={top_n},timelines=no"
    lookup = rank_cache.Lookup(use, names, options, keep)
    done = _run([names[i] for i in lookup.missing], top_n, workers, ray_address, fn, keep) if lookup.missing else []
    fresh = dict(zip(lookup.missing, done, strict=True))
    lookup.store(fresh)
    return [lookup.cached[i] if i in lookup.cached else fresh[i] for i in range(len(names))]


def _run(names: list[str], top_n: int, workers: int | RankPool | None,
         ray_address: str | None, fn: RankFn, keep: SharedStrings) -> list[list[RankOutcome]]:
    if ray_address is not None:
        return run_on_ray(fn, names, top_n, ray_address, keep=keep, progress=FILES_DONE)
    if isinstance(workers, RankPool):
        if len(names) < 2:
            return _in_process(names, top_n, fn, keep)
        return _run_processes(names, top_n, workers, fn, keep)
    n = parallel_workers(names, workers)
    if n == 1:
        return _in_process(names, top_n, fn, keep)
    with RankPool(n, warm_up=__name__) as pool:
        return _run_processes(names, top_n, pool, fn, keep)


def fix_duplicate_ranks(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """When the files' `distributedInfo.rank` repeat but their names give distinct ranks, the names win
    (`trace.folder.ranks_from_names`, the rule `load_traces` applies too)."""
    from_names = ranks_from_names([o.file for o in outcomes], [o.rank for o in outcomes])
    if from_names is None:
        return outcomes
    out = []
    for o, r in zip(outcomes, from_names, strict=True):
        b = None if o.breakdown is None else replace(o.breakdown, rank=r)
        out.append(replace(o, rank=r, breakdown=b, warnings=(*o.warnings, DUPLICATE_RANK_NOTE)))
    return out


# --- one warning per cause ------------------------------------------------------------------------------

_NUMBER = re.compile(r"\d[\d,.]*")


def _cause(message: str) -> str:
    """The cause of a warning: its text before the first ':' (the details follow it), numbers masked."""
    head = message.split(":", 1)[0] if ":" in message else message
    return _NUMBER.sub("N", head)


def _short(name: str, width: int = 24) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def group_warnings(per_file: Sequence[tuple[str, Sequence[str]]], max_names: int = 8) -> list[str]:
    """[(file name, its warnings)] → one line per cause. A cause seen in one file keeps its line, prefixed with
    the file when there are several files; a cause seen in k > 1 files becomes
    "k files: <message> (name1, name2, …)", the message shown whole when identical everywhere, else its cause."""
    by_cause: dict[str, list[tuple[str, str]]] = {}
    for name, warnings in per_file:
        for w in dict.fromkeys(warnings):  # one file repeating a warning counts once
            by_cause.setdefault(_cause(w), []).append((name, w))
    several = len(per_file) > 1
    out = []
    for cause, hits in by_cause.items():
        files = list(dict.fromkeys(n for n, _ in hits))
        messages = list(dict.fromkeys(w for _, w in hits))
        if len(files) == 1:
            out += [f"{files[0]}: {m}" if several else m for m in messages]
            continue
        shown = ", ".join(_short(n) for n in files[:max_names]) + (
            f", +{len(files) - max_names} more" if len(files) > max_names else "")
        text = messages[0] if len(messages) == 1 else f"{cause} (details differ per file)"
        out.append(f"{len(files)} files: {text} ({shown})")
    return out


# --- the cross-rank view --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankRow:
    """One rank over all its steps: summed GPU busy, span and communication union time (µs)."""

    rank: int | None
    file: str
    device_name: str | None
    steps: int
    gpu_busy_us: float
    gpu_span_us: float
    comm_us: float


@dataclass(frozen=True)
class StepSpread:
    """One step index present on every rank: its GPU span (step time) per rank, spread = max − min."""

    index: int
    kind: str
    min_us: float
    max_us: float
    median_us: float
    slowest_rank: int | None
    fastest_rank: int | None

    @property
    def spread_us(self) -> float:
        return self.max_us - self.min_us


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective over the common steps: summed kernel time per rank; the rank with the most waited most."""

    collective: str
    per_rank_us: tuple[float, ...]  # in the order of CrossRankView.ranks
    max_rank: int | None
    min_rank: int | None

    @property
    def skew_us(self) -> float:
        return max(self.per_rank_us) - min(self.per_rank_us)


@dataclass(frozen=True)
class CrossRankView:
    ranks: tuple[RankRow, ...]
    steps_compared: int
    steps: tuple[StepSpread, ...]
    collectives: tuple[CollectiveSkew, ...]

    @property
    def slowest_rank_counts(self) -> dict[int | None, int]:
        """How many common steps each rank was the slowest on (ranks never slowest are absent)."""
        counts: dict[int | None, int] = {}
        for s in self.steps:
            counts[s.slowest_rank] = counts.get(s.slowest_rank, 0) + 1
        return counts


def _row(b: TraceBreakdown) -> RankRow:
    return RankRow(b.rank, b.file, b.device_name, len(b.steps), sum(s.gpu_busy_us for s in b.steps),
                   sum(s.gpu_span_us for s in b.steps), sum(s.classes_us.get(COMMUNICATION, 0.0) for s in b.steps))


def _argext(values: Sequence[float], ranks: Sequence[int | None], pick: Callable[..., float]) -> int | None:
    return ranks[list(values).index(pick(values))]


def _step_spread(i: int, ranks: Sequence[TraceBreakdown]) -> StepSpread:
    spans = [r.steps[i].gpu_span_us for r in ranks]
    ids = [r.rank for r in ranks]
    return StepSpread(ranks[0].steps[i].index, ranks[0].steps[i].kind, min(spans), max(spans), median(spans),
                      _argext(spans, ids, max), _argext(spans, ids, min))


def _collective_skew(ranks: Sequence[TraceBreakdown], n: int) -> tuple[CollectiveSkew, ...]:
    names = sorted({c for r in ranks for s in r.steps[:n] for c in s.collectives})
    ids = [r.rank for r in ranks]
    out = []
    for name in names:
        totals = [sum(s.collectives[name].total_us for s in r.steps[:n] if name in s.collectives) for r in ranks]
        out.append(CollectiveSkew(name, tuple(totals), _argext(totals, ids, max), _argext(totals, ids, min)))
    return tuple(sorted(out, key=lambda c: -c.skew_us))


def cross_rank_view(ranks: Sequence[TraceBreakdown]) -> CrossRankView | None:
    """The compact comparison of ≥ 2 ranks (None for fewer). Steps are compared by position: step i of every
    rank is the same engine step when every rank ran the same schedule (TP/PP ranks do)."""
    if len(ranks) < 2:
        return None
    n = min(len(r.steps) for r in ranks)
    return CrossRankView(tuple(_row(b) for b in ranks), n, tuple(_step_spread(i, ranks) for i in range(n)),
                         _collective_skew(ranks, n))
