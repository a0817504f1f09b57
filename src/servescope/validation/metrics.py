"""Engine metrics in (issue 29.2): a Prometheus text-format scrape of a vLLM or SGLang `/metrics` endpoint, turned
into measured timing boundaries (TTFT, queue, prefill, decode, ITL, TPOT, E2E) with mean and percentiles, plus the
gauges that say under what load they were taken (running requests, KV usage, prefix-cache hit rate).

Series read (names, types and units as the engines document them; SERIES below carries each source):
  vLLM (docs "Production Metrics", docs/design/metrics.md; vllm/v1/metrics/loggers.py PrometheusStatLogger), all
  histograms in seconds: vllm:time_to_first_token_seconds, vllm:request_queue_time_seconds,
  vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds, vllm:inter_token_latency_seconds (older
  releases: vllm:time_per_output_token_seconds, a per-token decode gap, read as ITL when the newer one is absent),
  vllm:e2e_request_latency_seconds; histograms of tokens vllm:request_prompt_tokens / request_generation_tokens;
  gauges vllm:num_requests_running, vllm:kv_cache_usage_perc (older vllm:gpu_cache_usage_perc; a fraction 0–1
  despite the name); counters vllm:prefix_cache_hits / vllm:prefix_cache_queries (tokens; exposed with `_total`).
  SGLang (docs "Production Metrics", --enable-metrics): sglang:time_to_first_token_seconds,
  sglang:inter_token_latency_seconds or sglang:time_per_output_token_seconds, sglang:e2e_request_latency_seconds
  (histograms, seconds); gauges sglang:num_running_reqs, sglang:token_usage (fraction), sglang:cache_hit_rate.
Histograms: the `_bucket{le=...}` cumulative counts summed over label sets per `le` (Prometheus' `sum by (le)`),
mean = _sum / _count, quantiles as Prometheus' histogram_quantile: rank q·N, the first bucket whose cumulative
count reaches it, linear interpolation between the bucket's lower bound (0 for the first bucket) and its upper
bound; a rank in the +Inf bucket returns the highest finite bound (a lower bound of the true quantile).
A scrape is cumulative over the server's life: scrape a fresh server after one benchmark run (or difference two
scrapes) for the figures to describe that run; the gauges are the instant of the scrape.
Bad input (one line naming the file, the line or the series; MeasurementError): not Prometheus text, none of the
known series, a histogram whose cumulative counts fall, lack +Inf, or disagree with _count.
Does not: decide what the boundaries calibrate (cli/_measured.py builds typed figures) or simulate anything.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from servescope._paths import read_text
from servescope.errors import MeasurementError

CEILING = 64 << 20  # a /metrics scrape of one server is tens of KB; many ranks' label sets stay well below this
VLLM_SRC = ("vLLM docs 'Production Metrics' (docs.vllm.ai usage/metrics) and docs/design/metrics.md; "
            "vllm/v1/metrics/loggers.py PrometheusStatLogger")
SGLANG_SRC = "SGLang docs 'Production Metrics' (docs.sglang.io references/production_metrics; --enable-metrics)"
# boundary -> the histogram series that measure it, first found wins (newer name first), all in seconds
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "queue": ("vllm:request_queue_time_seconds",),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}
TOKEN_HISTOGRAMS = {"isl": ("vllm:request_prompt_tokens",), "osl": ("vllm:request_generation_tokens",)}
GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "prefix_hit_rate": ("sglang:cache_hit_rate",),
}
PREFIX_COUNTERS = (("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
                   ("vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries"))
KNOWN = (*(s for v in HISTOGRAMS.values() for s in v), *(s for v in GAUGES.values() for s in v),
         *(s for pair in PREFIX_COUNTERS for s in pair))
QUANTILES = (0.5, 0.9, 0.99)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over its label sets: (upper bound, cumulative count) ascending, +Inf last."""

    series: str
    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count > 0 else math.nan

    def quantile(self, q: float) -> float:
        """Prometheus histogram_quantile(q) (module docstring); NaN without observations."""
        total = self.buckets[-1][1]
        if total <= 0:
            return math.nan
        rank = q * total
        prev_le, prev_c = 0.0, 0.0
        for i, (le, c) in enumerate(self.buckets):
            if c >= rank:
                if math.isinf(le):
                    return self.buckets[-2][0] if len(self.buckets) > 1 else math.nan
                if i == 0 and le <= 0:
                    return le
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return self.buckets[-2][0] if len(self.buckets) > 1 else math.nan


@dataclass(frozen=True)
class Boundary:
    """One measured timing boundary, seconds; `series` says which histogram it came from."""

    name: str
    series: str
    count: float
    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float


@dataclass(frozen=True)
class EngineMetrics:
    """What a scrape measured. Gauges are None when the scrape has none of their series."""

    path: str
    engine: str  # vllm | sglang
    boundaries: dict[str, Boundary]
    mean_isl: float | None
    mean_osl: float | None
    running: float | None
    kv_usage: float | None
    prefix_hit_rate: float | None
    series: dict[str, str]  # what -> the series it was read from (running, kv_usage, prefix_hit_rate, isl, osl)

    @property
    def source(self) -> str:
        return VLLM_SRC if self.engine == "vllm" else SGLANG_SRC


Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_exposition(text: str, path: str | Path) -> Samples:
    """name -> [(labels, value)] of every sample of a Prometheus text exposition; MeasurementError naming the file
    and line of the first line that is neither a comment, blank, nor a sample."""
    out: Samples = {}
    for no, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if m is None:
            raise MeasurementError(f"{path}:{no}: not Prometheus text format (expected `name{{labels}} value`, got "
                                   f"{s[:40]!r}); expected a scrape of the engine's /metrics")
        name, labels_text, value_text = m.groups()
        labels = _labels(labels_text or "", path, no)
        try:
            value = float(value_text)
        except ValueError:
            raise MeasurementError(f"{path}:{no}: {name}: value {value_text[:20]!r} is not a number "
                                   "(Prometheus text format)") from None
        out.setdefault(name, []).append((labels, value))
    return out


def _labels(text: str, path: str | Path, line: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text.rstrip()):
        m = _LABEL.match(text, pos)
        if m is None:
            raise MeasurementError(f"{path}:{line}: not Prometheus text format (bad labels {text[:40]!r})")
        labels[m.group(1)] = m.group(2)
        pos = m.end()
    return labels


def histogram(samples: Samples, series: str, path: str | Path) -> Histogram | None:
    """The histogram `series` summed over its label sets (`sum by (le)`), None when absent; MeasurementError naming
    the series when its buckets are inconsistent (no +Inf, a falling cumulative count, +Inf ≠ _count)."""
    rows = samples.get(series + "_bucket")
    if not rows:
        return None
    by_le: dict[float, float] = {}
    for labels, v in rows:
        if "le" not in labels:
            raise MeasurementError(f"{path}: {series}: a _bucket sample without `le`")
        try:
            le = float(labels["le"])
        except ValueError:
            raise MeasurementError(f"{path}: {series}: bucket bound le={labels['le']!r} is not a number") from None
        by_le[le] = by_le.get(le, 0.0) + v
    buckets = tuple(sorted(by_le.items()))
    if not math.isinf(buckets[-1][0]):
        raise MeasurementError(f"{path}: {series}: inconsistent histogram (no le=\"+Inf\" bucket)")
    for (le0, c0), (le1, c1) in zip(buckets, buckets[1:], strict=False):
        if c1 < c0 or c0 < 0:
            raise MeasurementError(f"{path}: {series}: inconsistent histogram (cumulative count falls from {c0:g} "
                                   f"at le={le0:g} to {c1:g} at le={le1:g})")
    total = sum(v for _, v in samples.get(series + "_sum", []))
    count = sum(v for _, v in samples.get(series + "_count", []))
    if series + "_count" in samples and not math.isclose(count, buckets[-1][1], rel_tol=1e-9, abs_tol=1e-9):
        raise MeasurementError(f"{path}: {series}: inconsistent histogram (_count {count:g} ≠ the +Inf bucket's "
                               f"{buckets[-1][1]:g})")
    if series + "_count" not in samples:
        count = buckets[-1][1]
    return Histogram(series, buckets, total, count)


def _first_histogram(samples: Samples, names: tuple[str, ...], path: str | Path) -> Histogram | None:
    for name in names:
        h = histogram(samples, name, path)
        if h is not None:
            return h
    return None


def _gauge(samples: Samples, names: tuple[str, ...]) -> tuple[float, str] | None:
    """The first present gauge, summed over label sets (running requests of several ranks add up) — except
    fractions, averaged (KV usage, hit rate)."""
    for name in names:
        rows = samples.get(name)
        if rows:
            vals = [v for _, v in rows if math.isfinite(v)]
            if not vals:
                continue
            total = sum(vals)
            fraction = name.endswith(("_perc", "usage", "rate"))
            return (total / len(vals) if fraction else total), name
    return None


def _counter(samples: Samples, name: str) -> float | None:
    rows = samples.get(name + "_total") or samples.get(name)
    return None if not rows else sum(v for _, v in rows)


def read_metrics(path: str | Path) -> EngineMetrics:
    """A vLLM or SGLang /metrics scrape (module docstring) through the guarded reader."""
    text = read_text(path, "Prometheus metrics scrape", MeasurementError, CEILING)
    if text.lstrip().startswith(("{", "[")):
        raise MeasurementError(f"{path}: not Prometheus text format (it reads as JSON; expected a scrape of the "
                               "engine's /metrics, e.g. `curl http://HOST:PORT/metrics > FILE`)")
    samples = parse_exposition(text, path)
    found = {n for n in KNOWN if n in samples or n + "_bucket" in samples or n + "_total" in samples}
    if not found:
        raise MeasurementError(f"{path}: none of the known vLLM/SGLang series (e.g. vllm:time_to_first_token_"
                               f"seconds, sglang:time_to_first_token_seconds; {len(samples)} other series)")
    engine = "vllm" if any(n.startswith("vllm:") for n in found) else "sglang"
    boundaries: dict[str, Boundary] = {}
    for what, names in HISTOGRAMS.items():
        h = _first_histogram(samples, names, path)
        if h is not None and h.count > 0:
            p50, p90, p99 = (h.quantile(q) for q in QUANTILES)
            boundaries[what] = Boundary(what, h.series, h.count, h.mean, p50, p90, p99)
    series: dict[str, str] = {}
    lengths: dict[str, float | None] = {}
    for what, names in TOKEN_HISTOGRAMS.items():
        h = _first_histogram(samples, names, path)
        lengths[what] = h.mean if h is not None and h.count > 0 else None
        if h is not None:
            series[what] = h.series
    gauges: dict[str, float | None] = {}
    for what, names in GAUGES.items():
        g = _gauge(samples, names)
        gauges[what] = None if g is None else g[0]
        if g is not None:
            series[what] = g[1]
    if gauges["prefix_hit_rate"] is None:
        for hits_name, queries_name in PREFIX_COUNTERS:
            hits, queries = _counter(samples, hits_name), _counter(samples, queries_name)
            if hits is not None and queries:
                gauges["prefix_hit_rate"] = hits / queries
                series["prefix_hit_rate"] = f"{hits_name} / {queries_name}"
                break
    return EngineMetrics(str(path), engine, boundaries, lengths["isl"], lengths["osl"], gauges["running"],
                         gauges["kv_usage"], gauges["prefix_hit_rate"], series)


def looks_like_metrics(path: str | Path) -> bool:
    """Whether a file reads as Prometheus text rather than JSON (a `--measured` value: a scrape or a result file):
    its first non-blank character is `#` or a metric name's."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(4096).decode("utf-8-sig", errors="replace").lstrip()
    except OSError:
        return False
    return head.startswith("#") or bool(re.match(rf"{_NAME}[{{\s]", head))
