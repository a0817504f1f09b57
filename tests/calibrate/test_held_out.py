"""The error of calibrating on a series' own points (calibrate.held_out), on the real dev CSV (ai-dynamo/
aiconfigurator silicon_sample, tests/data/validation): every held-out row is a point the fit never saw, and the
numbers `validate --calibrate-on` prints are these."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.calibrate.held_out import MIN_CONCURRENCIES, held_out
from servescope.cli import main
from servescope.validation.validate import read_rows

DEV = Path(__file__).parents[1] / "data" / "validation" / "measured_serving_dev.csv"


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    return read_rows(DEV)


@pytest.fixture(scope="module")
def held(rows):  # type: ignore[no-untyped-def]
    """Each mode computed once for the module (a calibration by term per series: tens of seconds on 2 cores)."""
    return {mode: held_out(rows, mode) for mode in ("lowest", "ends")}


def _expected_held_out(rows, mode: str) -> int:  # type: ignore[no-untyped-def]
    """Rows of series with >= MIN_CONCURRENCIES concurrencies, less those at the calibrating concurrencies."""
    series = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            series[(id(r.scenario), r.series)].append(r)
    n = 0
    for g in series.values():
        cs = sorted({r.concurrency for r in g})
        if len(cs) < MIN_CONCURRENCIES:
            continue
        fit = {cs[0]} if mode == "lowest" else {cs[0], cs[-1]}
        n += sum(1 for r in g if r.concurrency not in fit)
    return n


@pytest.mark.parametrize("mode", ["lowest", "ends"])
def test_only_points_the_fit_never_saw_are_scored(rows, held, mode: str) -> None:  # type: ignore[no-untyped-def]
    h = held[mode]
    assert len(h.meas_tpot) == _expected_held_out(rows, mode) > 500


def test_calibrating_on_the_ends_lowers_held_out_tpot_error(held) -> None:  # type: ignore[no-untyped-def]
    s = held["ends"].summary()
    assert s["tpot_mape"] < s["uncalibrated_tpot_mape"]
    # two TTFT points calibrate TTFT: held-out TTFT error falls below the uncalibrated model's
    assert s["ttft_mape"] < s["uncalibrated_ttft_mape"]
    # one point: TPOT by term no worse than the decode level it replaced, on the same rows
    one = held["lowest"].summary()
    assert one["tpot_mape"] <= one["level_tpot_mape"] * 1.02
    assert s["tpot_q10"] < 1.0 < s["tpot_q90"] and 0.6 <= s["tpot_coverage"] <= 0.95


def test_cli_calibrate_on(tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The CLI prints what held_out computes, on a small CSV of the dev file's first series (fast)."""
    import csv as csvmod

    with DEV.open(newline="") as fh:
        reader = csvmod.DictReader(fh)
        assert reader.fieldnames is not None
        agg = [r for r in reader if r["mode"] == "agg"]
        small = [r for r in agg if (r["model_path"], r["system"]) == (agg[0]["model_path"], agg[0]["system"])]
    path = tmp_path / "small.csv"
    with path.open("w", newline="") as fh:
        w = csvmod.DictWriter(fh, fieldnames=reader.fieldnames)
        w.writeheader()
        w.writerows(small[:60])
    out = CliRunner().invoke(main, ["validate", str(path), "--calibrate-on", "lowest,ends", "--json"])
    assert out.exit_code == 0, out.output
    cal = json.loads(out.stdout)["calibrated"]
    assert set(cal) == {"lowest", "ends"}
    for g in cal.values():
        assert {"tpot_mape", "ttft_mape", "tpot_bias", "ttft_bias", "series", "rows", "tpot_coverage",
                "ttft_coverage", "level_tpot_mape", "unreachable"} <= set(g)
    want = {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in held_out(read_rows(path), "ends").summary().items()}
    assert cal["ends"] == pytest.approx(want, nan_ok=True)
    bad = CliRunner().invoke(main, ["validate", str(DEV), "--calibrate-on", "middle"])
    assert bad.exit_code == 1 and "expected lowest | ends" in bad.output


def test_the_shipped_calibrated_ranges_are_what_the_script_computes(held) -> None:  # type: ignore[no-untyped-def]
    from bench_scripts import bench_script
    from servescope.specs import tables

    summaries = {mode: h.summary() for mode, h in held.items()}
    built, body = bench_script("calibrated_ranges").build_from(summaries, DEV)
    assert any(f"{built['cases']['calibrated_1pt']['tpot_mape']:.1%}" in line for line in body)
    assert built["cases"] == tables.calibrated_ranges()["cases"]
