"""`validate` reads an optional `arrival` column (closed, poisson:RATE, burst:N) and simulates the rows that carry
one (issue 17 part 4): three real dev rows (tests/data/validation/arrival_rows.csv, PROVENANCE.md) with a Poisson,
a burst and no arrival."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.simulate import Arrival
from servescope.units import MS_PER_S
from servescope.validation.simulate_rows import simulate_row, with_arrivals
from servescope.validation.validate import read_rows, validate_csv

CSV = Path(__file__).parents[1] / "data" / "validation" / "arrival_rows.csv"


@pytest.fixture(scope="module")
def doc() -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(main, ["validate", str(CSV), "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_rows_with_an_arrival_are_simulated_under_it(doc: dict) -> None:  # type: ignore[type-arg]
    arrivals = {r["id"]: r["arrival"] for r in csv.DictReader(CSV.open())}
    rows = {r.id: r for r in read_rows(CSV)}
    closed = {r.id: r for r in validate_csv(CSV).rows}
    got = {r["id"]: r for r in doc["rows"]}
    assert set(got) == set(arrivals) and not doc["skipped"]
    for rid, arrival in arrivals.items():
        g = got[rid]
        if not arrival:  # the closed form, as validate_csv gives it
            assert g["pred_tpot_ms"] == pytest.approx(closed[rid].pred_tpot_ms)
            continue
        sc = rows[rid].scenario
        assert sc is not None
        sim = simulate_row(sc, rows[rid].concurrency, arrival=Arrival.parse(arrival))
        assert g["pred_tpot_ms"] == pytest.approx(sim.tpot.mean_s * MS_PER_S)
        assert g["pred_ttft_ms"] == pytest.approx(sim.ttft.mean_s * MS_PER_S)
        assert sim.settings["arrival"] == arrival
        k = g["pred_tpot_ms"] / closed[rid].pred_tpot_ms  # the closed form's range, scaled like the prediction
        assert g["pred_tpot_ms_low"] == pytest.approx(closed[rid].pred_tpot_ms_low * k)


def test_a_slow_poisson_client_batches_less_than_its_closed_loop() -> None:
    r = next(r for r in read_rows(CSV) if r.arrival.startswith("poisson"))
    assert r.scenario is not None
    slow = simulate_row(r.scenario, r.concurrency, arrival=Arrival.parse("poisson:0.5"))
    loop = simulate_row(r.scenario, r.concurrency)
    assert slow.tpot.mean_s < loop.tpot.mean_s  # fewer sequences per decode step: a shorter step


def test_a_bad_arrival_skips_its_row_with_the_reason(tmp_path: Path) -> None:
    text = CSV.read_text().splitlines()
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join([text[0], text[1].rsplit(",", 1)[0] + ",poisson:fast", *text[2:]]) + "\n")
    rows = read_rows(bad)
    assert rows[0].scenario is None and "expected closed, poisson:RATE" in rows[0].reason
    assert len(with_arrivals(bad, validate_csv(bad)).rows) == 2
