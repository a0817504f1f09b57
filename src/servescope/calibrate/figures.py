"""Typed figures: a number the user measured, written `metric=value[unit]@cN[,isl=I,osl=O]`.

    tpot=12.1ms@c1                      ttft=340ms@c1                  itl=9.8ms@c16
    e2e=5.2s@c64,isl=1024,osl=1024      output=1536tok/s@c128          output=1.5ktok/s@c128
    request_rate=3.2req/s@c16           allreduce_share=0.515@c1       moe_share=38%@c1
    tpot=12.1ms±0.4ms@c1                tpot=12.1ms±3%@c1              allreduce_share=0.515±0.03@c1
    spec_gain=1.32@c1                   spec_tpot=9.2ms@c1             (speculative decoding: measured with it on)

Does: parse one spec into a `Figure` in SI units (seconds, output tokens/s, requests/s, a fraction), through
servescope.units. Metrics (METRICS): the latencies tpot, ttft, itl, e2e (units ms, s, us, µs — a unit is
required: a bare 12.1 could be ms or s); `output`, output tokens/s of the whole instance (tok/s, ktok/s; default
tok/s); `request_rate` (req/s, the default); `spec_gain`, the measured speedup of speculative decoding (TPOT
without / with, a factor ≥ 1, unit `x` or none) and `spec_tpot`, the TPOT measured with it on; and `<name>_share`, the share of a decode step's time spent in a
kernel class (analysis.vocab.KERNEL_CLASSES: `communication_share`, `moe_share`, ...) or a collective
(COLLECTIVES; underscores optional: `allreduce_share` is `all_reduce_share`), a fraction in [0, 1] or a
percentage (`51.5%`). `@cN` (the concurrency it was measured at, N ≥ 1) is required; `isl=`/`osl=` (tokens)
are optional. A stated noise follows the value after `±` (or `+-`): in the value's units (`±0.4ms`; no unit: the
value's), or `%` of the value (for a share: `±3%` of 51.5% is percentage points); kept as `noise`, a fraction of
the value (None: not stated; calibrate.consistency assumes one). Every bad spec raises MeasurementError with one line naming what is known (metrics, units, keys).
Does not: decide what a figure calibrates (issue 17) or which figure a command uses (servescope.advise).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from servescope.analysis.vocab import COLLECTIVES, KERNEL_CLASSES
from servescope.errors import MeasurementError
from servescope.units import KILO, ms_to_s, us_to_s

SYNTAX = "metric=value[unit]@cN[,isl=I,osl=O], e.g. tpot=12.1ms@c1"
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": ms_to_s(1.0), "us": us_to_s(1.0), "µs": us_to_s(1.0),
                                "μs": us_to_s(1.0)}  # micro sign and Greek mu
RATE_UNITS: dict[str, float] = {"tok/s": 1.0, "ktok/s": KILO}
REQUEST_UNITS: dict[str, float] = {"req/s": 1.0}
SHARE_UNITS: dict[str, float] = {"": 1.0, "%": 0.01}
TIME_METRICS = ("tpot", "ttft", "itl", "e2e", "spec_tpot")
FACTOR_UNITS: dict[str, float] = {"": 1.0, "x": 1.0, "×": 1.0}
SPEC_METRICS = ("spec_gain", "spec_tpot")
SHARE_NAMES: tuple[str, ...] = (*KERNEL_CLASSES, *COLLECTIVES)
# metric -> (its units and their factor to SI, the unit assumed when none is written (None: one is required),
# the SI unit of value_si)
METRICS: dict[str, tuple[dict[str, float], str | None, str]] = {
    **{m: (TIME_UNITS, None, "s") for m in TIME_METRICS},
    "output": (RATE_UNITS, "tok/s", "tok/s"),
    "request_rate": (REQUEST_UNITS, "req/s", "req/s"),
    "spec_gain": (FACTOR_UNITS, "", "1"),
}
KNOWN_METRICS = (*METRICS, "<class>_share")
_NUMBER = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*?)\s*$")
_LENGTH_KEYS = ("isl", "osl")


@dataclass(frozen=True)
class Figure:
    """One measured figure. `value_si` is in `unit` (s, tok/s, req/s, or 1 for a share); `text` is the spec as
    given."""

    metric: str  # tpot | ttft | itl | e2e | output | request_rate | spec_gain | spec_tpot | <class or collective>_share
    value_si: float
    concurrency: int
    isl: int | None
    osl: int | None
    text: str
    noise: float | None = None  # stated noise, a fraction of value_si (± 0.4 ms on 12.1 ms: 0.033); None: not stated
    source: str = ""  # where it came from when not typed: "FILE:LINE (tool, run)" of a benchmark result

    def described(self) -> str:
        """The spec, and the file it was read from when it was not typed."""
        return f"{self.text} (from {self.source})" if self.source else self.text

    @property
    def unit(self) -> str:
        """The SI unit of `value_si`."""
        return "1" if self.is_share else METRICS[self.metric][2]

    @property
    def is_share(self) -> bool:
        return self.metric.endswith("_share")

    def __str__(self) -> str:
        return self.text


def _fail(text: str, why: str) -> MeasurementError:
    return MeasurementError(f"typed figure {text!r}: {why} (syntax: {SYNTAX})")


def _share_name(metric: str) -> str | None:
    """The canonical `<name>_share` of a share metric, underscores in the name optional; None if unknown."""
    stem = metric.removesuffix("_share").replace("_", "")
    return next((f"{n}_share" for n in SHARE_NAMES if n.replace("_", "") == stem), None)


def _metric(text: str, raw: str) -> str:
    metric = raw.strip().lower()
    if metric in METRICS:
        return metric
    if metric.endswith("_share"):
        share = _share_name(metric)
        if share is None:
            raise _fail(text, f"unknown share {metric!r}; known: {', '.join(f'{n}_share' for n in SHARE_NAMES)}")
        return share
    raise _fail(text, f"unknown metric {metric or '(none)'!r}; known: {', '.join(KNOWN_METRICS)}")


def _units(metric: str) -> tuple[dict[str, float], str | None, str]:
    return (SHARE_UNITS, "", "1") if metric.endswith("_share") else METRICS[metric]


def _number(text: str, raw: str) -> tuple[float, str]:
    m = _NUMBER.fullmatch(raw)
    if m is None:
        raise _fail(text, f"{raw.strip()!r} is not a number with a unit")
    return float(m.group(1)), m.group(2)


def _noise(text: str, metric: str, raw: str, value: float, value_unit: str) -> float:
    """A stated noise as a fraction of the value (module docstring)."""
    number, unit = _number(text, raw)
    units, _, si = _units(metric)
    if not math.isfinite(number) or number < 0:
        raise _fail(text, f"the noise after ± must be a number ≥ 0, got {raw.strip()!r}")
    if unit == "%" and si != "1":
        return number / 100.0
    unit = unit or value_unit
    if unit not in units:
        listed = ", ".join(u for u in units if u not in ("", "μs"))
        raise _fail(text, f"unknown unit {unit!r} for the noise of {metric}; known: {listed}, or %")
    return number * units[unit] / value if value > 0 else math.inf


def _value(text: str, metric: str, raw: str) -> tuple[float, float | None]:
    main, sep, noise_raw = raw.replace("+-", "±").partition("±")
    number, unit = _number(text, main)
    default: str | None
    units, default, si = _units(metric)
    if not unit and sep and (shared := _number(text, noise_raw)[1]) in units:
        unit = shared  # 12.1±0.4ms: one unit for both
    if not unit:
        if default is None:
            raise _fail(text, f"{metric} needs a unit, one of {', '.join(u for u in units if u != 'μs')}")
        unit = default
    if unit not in units:
        listed = ", ".join(repr(u) if u == "" else u for u in units if u != "μs")
        raise _fail(text, f"unknown unit {unit!r} for {metric}; known: {listed}")
    value = number * units[unit]
    if not math.isfinite(value):
        raise _fail(text, f"{metric} must be finite")
    if metric == "spec_gain":
        if value < 1.0:
            raise _fail(text, f"spec_gain {raw.strip()} is below 1: a slowdown is not a gain to calibrate on (give "
                              "spec_tpot=…@cN with the TPOT measured with speculation on)")
    elif si == "1":
        if not 0.0 <= value <= 1.0:
            raise _fail(text, f"a share is between 0 and 1 (or 0% and 100%), got {raw.strip()}")
    elif value <= 0.0:
        raise _fail(text, f"{metric} must be positive, got {raw.strip()}")
    return value, (_noise(text, metric, noise_raw, value, unit) if sep else None)


def _positive_int(text: str, what: str, raw: str) -> int:
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18 or int(raw) < 1:  # 18 digits: no 4,300-digit int()
        raise _fail(text, f"{what} must be a positive integer, got {raw!r}")
    return int(raw)


def _load(text: str, raw: str) -> tuple[int, int | None, int | None]:
    head, *rest = raw.split(",")
    head = head.strip()
    if head[:1].lower() != "c":
        raise _fail(text, f"after '@' comes the concurrency cN (e.g. @c1), got {head!r}")
    concurrency = _positive_int(text, "the concurrency", head[1:])
    lengths: dict[str, int] = {}
    for item in rest:
        key, eq, val = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in _LENGTH_KEYS:
            raise _fail(text, f"unknown {item.strip()!r} after the concurrency; known: isl=I, osl=O")
        if key in lengths:
            raise _fail(text, f"{key} given twice")
        lengths[key] = _positive_int(text, key, val)
    return concurrency, lengths.get("isl"), lengths.get("osl")


def parse_figure(text: str) -> Figure:
    """One typed figure (module docstring); MeasurementError with one line for a bad spec."""
    metric_raw, eq, rest = text.partition("=")
    if not eq:
        raise _fail(text, "expected metric=value")
    metric = _metric(text, metric_raw)
    value_raw, at, load = rest.partition("@")
    if not at:
        raise _fail(text, "missing @cN, the concurrency it was measured at")
    value, noise = _value(text, metric, value_raw)
    concurrency, isl, osl = _load(text, load)
    return Figure(metric, value, concurrency, isl, osl, text.strip(), noise)


def parse_figures(texts: Iterable[str]) -> tuple[Figure, ...]:
    """Each spec parsed, in order."""
    return tuple(parse_figure(t) for t in texts)

