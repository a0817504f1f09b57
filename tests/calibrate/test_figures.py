"""Typed figures `metric=value[unit]@cN[,isl=I,osl=O]` (issue 17 part 1's syntax; servescope.calibrate.figures)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servescope.calibrate.figures import (
    KNOWN_METRICS,
    TIME_UNITS,
    Figure,
    parse_figure,
    parse_figures,
)
from servescope.errors import MeasurementError, ServescopeError


@pytest.mark.parametrize(("text", "metric", "value_si", "c", "isl", "osl"), [
    ("tpot=12.1ms@c1", "tpot", 0.0121, 1, None, None),
    ("ttft=340ms@c1", "ttft", 0.34, 1, None, None),
    ("itl=800us@c16", "itl", 0.0008, 16, None, None),
    ("itl=800µs@c16", "itl", 0.0008, 16, None, None),
    ("e2e=5.2s@c64,isl=1024,osl=1024", "e2e", 5.2, 64, 1024, 1024),
    ("output=1536tok/s@c128,isl=1024,osl=1024", "output", 1536.0, 128, 1024, 1024),
    ("output=1.5ktok/s@c128", "output", 1500.0, 128, None, None),
    ("output=1536@c128", "output", 1536.0, 128, None, None),  # tok/s is the default unit
    ("request_rate=3.2req/s@c16", "request_rate", 3.2, 16, None, None),
    ("allreduce_share=0.515@c1", "all_reduce_share", 0.515, 1, None, None),  # underscores optional
    ("all_reduce_share=51.5%@c1", "all_reduce_share", 0.515, 1, None, None),
    ("moe_share=0.38@c1,osl=512", "moe_share", 0.38, 1, None, 512),
    (" TPOT = 12.1 ms @ c1 ", "tpot", 0.0121, 1, None, None),
])
def test_examples(text: str, metric: str, value_si: float, c: int, isl: int | None, osl: int | None) -> None:
    f = parse_figure(text)
    assert (f.metric, f.concurrency, f.isl, f.osl) == (metric, c, isl, osl)
    assert f.value_si == pytest.approx(value_si, rel=1e-12)
    assert f.text == text.strip()


def test_units_and_frozen() -> None:
    assert parse_figure("tpot=12.1ms@c1").unit == "s"
    assert parse_figure("output=1536tok/s@c128").unit == "tok/s"
    assert parse_figure("request_rate=2@c4").unit == "req/s"
    assert parse_figure("moe_share=0.2@c1").unit == "1"
    f = parse_figure("tpot=12.1ms@c1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.value_si = 1.0  # type: ignore[misc]
    assert parse_figures(["tpot=12.1ms@c1", "ttft=340ms@c1"])[1].metric == "ttft"


@pytest.mark.parametrize(("text", "says"), [
    ("foo=1ms@c1", "known: tpot, ttft, itl, e2e, spec_tpot, output, request_rate, spec_gain, <class>_share"),
    ("tpot=12.1@c1", "needs a unit, one of s, ms, us, µs"),
    ("tpot=12.1hr@c1", "unknown unit 'hr' for tpot; known: s, ms, us, µs"),
    ("output=3req/s@c1", "known: tok/s, ktok/s"),
    ("gpu_share=0.5@c1", "unknown share 'gpu_share'; known: communication_share"),
    ("tpot=12.1ms", "missing @cN"),
    ("tpot=12.1ms@1", "the concurrency cN"),
    ("tpot=12.1ms@c0", "the concurrency must be a positive integer"),
    ("tpot=12.1ms@c1,isl=0", "isl must be a positive integer"),
    ("tpot=12.1ms@c1,batch=4", "known: isl=I, osl=O"),
    ("tpot=12.1ms@c1,isl=4,isl=5", "isl given twice"),
    ("tpot=0ms@c1", "must be positive"),
    ("tpot=-1ms@c1", "must be positive"),
    ("tpot=1e400ms@c1", "must be finite"),
    ("moe_share=1.5@c1", "between 0 and 1"),
    ("moe_share=150%@c1", "between 0 and 1"),
    ("tpot=abc@c1", "not a number"),
    ("12.1ms@c1", "expected metric=value"),
    ("=12.1ms@c1", "unknown metric '(none)'"),
    ("", "expected metric=value"),
])
def test_bad_specs_say_what_is_known(text: str, says: str) -> None:
    with pytest.raises(MeasurementError) as info:
        parse_figure(text)
    msg = str(info.value)
    assert says in msg
    assert "\n" not in msg and "syntax: metric=value[unit]@cN" in msg


_TIME = st.sampled_from(sorted(TIME_UNITS))
_VALUE = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(metric=st.sampled_from(["tpot", "ttft", "itl", "e2e"]), value=_VALUE, unit=_TIME,
       c=st.integers(1, 10**6), isl=st.none() | st.integers(1, 10**6), osl=st.none() | st.integers(1, 10**6))
def test_time_figures_round_trip(metric: str, value: float, unit: str, c: int, isl: int | None,
                                 osl: int | None) -> None:
    tail = "".join(f",{k}={v}" for k, v in (("isl", isl), ("osl", osl)) if v is not None)
    f = parse_figure(f"{metric}={value!r}{unit}@c{c}{tail}")
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6}[unit]  # written out, not taken from the code
    assert math.isclose(f.value_si, value * scale, rel_tol=1e-12)
    assert (f.metric, f.concurrency, f.isl, f.osl, f.unit) == (metric, c, isl, osl, "s")


@given(value=_VALUE, kilo=st.booleans(), c=st.integers(1, 4096))
def test_output_figures_round_trip(value: float, kilo: bool, c: int) -> None:
    f = parse_figure(f"output={value!r}{'ktok/s' if kilo else 'tok/s'}@c{c}")
    assert math.isclose(f.value_si, value * (1000.0 if kilo else 1.0), rel_tol=1e-12)


@given(share=st.floats(min_value=0.0, max_value=1.0), percent=st.booleans(),
       name=st.sampled_from(["allreduce", "all_reduce", "communication", "moe", "gemm", "attention", "alltoall"]))
def test_share_figures_round_trip(share: float, percent: bool, name: str) -> None:
    text = f"{name}_share={share * 100!r}%@c1" if percent else f"{name}_share={share!r}@c1"
    if percent and share * 100 * 0.01 > 1.0:  # 100% read back a hair above 1 by float rounding
        return
    f = parse_figure(text)
    assert f.metric.endswith("_share") and f.metric.replace("_", "") == f"{name}_share".replace("_", "")
    assert math.isclose(f.value_si, share, rel_tol=1e-9, abs_tol=1e-12)


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_one_line(text: str) -> None:
    try:
        f = parse_figure(text)
    except ServescopeError as exc:
        assert isinstance(exc, MeasurementError)
        assert "\n" not in str(exc)
        return
    assert isinstance(f, Figure) and f.concurrency >= 1 and math.isfinite(f.value_si)
    assert f.metric in KNOWN_METRICS or f.metric.endswith("_share")


@pytest.mark.parametrize(("text", "noise"), [
    ("tpot=12.1ms±0.4ms@c1", 0.4 / 12.1),
    ("tpot=12.1±0.4ms@c1", 0.4 / 12.1),  # one unit for both
    ("tpot=12.1ms+-3%@c1", 0.03),
    ("tpot=12.1ms±400us@c1", 0.4 / 12.1),
    ("allreduce_share=51.5%±3%@c1", 0.03 / 0.515),  # a share's % noise is percentage points
    ("allreduce_share=0.515±0.03@c1", 0.03 / 0.515),
    ("tpot=12.1ms@c1", None),
])
def test_a_stated_noise_is_a_fraction_of_the_value(text: str, noise: float | None) -> None:
    f = parse_figure(text)
    assert f.value_si == pytest.approx(0.515 if f.is_share else 12.1e-3, rel=1e-12)
    assert (f.noise is None) if noise is None else f.noise == pytest.approx(noise, rel=1e-12)


@pytest.mark.parametrize(("text", "says"), [
    ("tpot=12.1ms±0.4hr@c1", "unknown unit 'hr' for the noise of tpot; known: s, ms, us, µs, or %"),
    ("tpot=12.1ms±-1ms@c1", "the noise after ± must be a number ≥ 0"),
])
def test_a_bad_noise_says_what_is_known(text: str, says: str) -> None:
    with pytest.raises(MeasurementError, match=says):
        parse_figure(text)
