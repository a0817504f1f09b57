"""The planner's ranges come from measured error (issue 7, part 6), not a fixed ±30 %.

The expected quantiles are read here with stdlib json from specs/data/ranges.json (written by
bench/validation_report.py from one cross-validation run), not through the planner's loader; the extraction of
`change_error` itself is checked on synthetic pairs whose answer is known by construction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench_scripts import bench_script
from servescope.cli import main
from servescope.perfmodel.scenario import Scenario
from servescope.planner import plan
from servescope.planner.whatif import gain_bounds
from servescope.report.plan_doc import plan_document
from servescope.report.plan_text import plan_lines

ROOT = Path(__file__).resolve().parents[2]
RANGES = json.loads((ROOT / "src/servescope/specs/data/ranges.json").read_text(encoding="utf-8"))
H100 = ["--model", "gpt-oss-20b", "--gpu", "h100_sxm"]  # system_seen: H100 rows are in the dev CSV
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]


def _plan_json(*args: str) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(main, ["plan", *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _unbounded(doc: dict) -> list[dict]:  # type: ignore[type-arg]
    """Applicable tracks without acceptance bounds (their predicted gain is one number)."""
    return [t for t in doc["tracks"] if t["applicable"] and t["gain"] is not None and t["kind"] != "speculative_decoding"]


@pytest.mark.parametrize(("args", "case"), [(H100, "system_seen"), (KIMI, "system_unseen")])
def test_gain_range_is_the_cross_validated_ratio_error(args: list[str], case: str) -> None:
    doc = _plan_json(*args)
    q10, q90 = RANGES["change_error"][case]["tpot"]
    rng = doc["range"]
    assert (rng["basis"], rng["case"]) == ("cross_validated", case)
    assert (rng["gain_ratio_q10"], rng["gain_ratio_q90"]) == pytest.approx((q10, q90))
    assert rng["pairs"] == RANGES["change_error"][case]["pairs"] > 1000
    tracks = _unbounded(doc)
    assert len(tracks) >= 2
    for t in tracks:
        # measured gain = predicted gain × predicted ratio / measured ratio: [g / q90, g / q10]
        assert t["gain_low"] == pytest.approx(t["gain"] / q90, rel=1e-9)
        assert t["gain_high"] == pytest.approx(t["gain"] / q10, rel=1e-9)
        # not the old constant: ±30 % on the change (gain_bounds(g, 0.3)) gives other ends
        old = gain_bounds(t["gain"], 0.3)
        assert abs(t["gain_low"] - old[0]) + abs(t["gain_high"] - old[1]) > 1e-3, t["kind"]


def test_small_gains_keep_the_measured_ratio_error() -> None:
    """The measured error of a predicted ratio does not vanish with the size of the change, so a 1.02x track's
    range spans 1 (it may not pay), where r·min(|1 − n|, n) would have called it 1.014–1.026."""
    doc = _plan_json(*H100)
    q10, q90 = doc["range"]["gain_ratio_q10"], doc["range"]["gain_ratio_q90"]
    widths = {t["kind"]: t["gain_high"] / t["gain_low"] for t in _unbounded(doc)}
    assert all(w == pytest.approx(q90 / q10, rel=1e-9) for w in widths.values())
    assert q10 < 1.0 < q90


def test_baseline_carries_the_interval_model_prints() -> None:
    r = CliRunner().invoke(main, ["model", *KIMI, "--concurrency", "1", "--json"])
    assert r.exit_code == 0, r.output
    point = json.loads(r.stdout)["points"][0]
    doc = _plan_json(*KIMI)
    assert doc["baseline"]["tpot_ms"] == pytest.approx(point["tpot_ms"], rel=1e-6)
    assert doc["range"]["baseline_tpot_ms_low"] == pytest.approx(point["tpot_ms_low"], rel=1e-6)
    assert doc["range"]["baseline_tpot_ms_high"] == pytest.approx(point["tpot_ms_high"], rel=1e-6)
    q10, q90 = RANGES["cases"]["system_unseen"]["tpot"]
    assert doc["range"]["baseline_tpot_ms_low"] == pytest.approx(point["tpot_ms"] * q10, rel=1e-6)
    assert doc["range"]["baseline_tpot_ms_high"] == pytest.approx(point["tpot_ms"] * q90, rel=1e-6)


def test_no_measured_error_says_rule_of_thumb() -> None:
    """AMD MI300X: no measured serving row on any AMD GPU, so no measured error applies; the plan says so."""
    assert "amd" not in RANGES["vendors"] and "vendor_unseen" not in RANGES["change_error"]
    sc = Scenario.build("gpt-oss-20b", "mi300x")
    p = plan(sc)
    doc = plan_document(p)
    rng = doc["range"]
    assert (rng["basis"], rng["case"], rng["r"]) == ("rule_of_thumb", "vendor_unseen", 0.3)
    assert rng["gain_ratio_q10"] is None and rng["pairs"] == 0
    assert "rule of thumb ±30%, no measured error for this case" in rng["text"]
    assert rng["text"] in plan_lines(p)
    for t in _unbounded(doc):
        assert (t["gain_low"], t["gain_high"]) == pytest.approx(gain_bounds(t["gain"], 0.3))


def test_cross_validated_text_names_the_case() -> None:
    sc = Scenario.build("gpt-oss-20b", "h100_sxm")
    lines = plan_lines(plan(sc))
    assert "cross_validated ranges" in lines[0] and "±30%" not in "\n".join(lines)
    assert any(line.startswith("range: cross-validated (system_seen") for line in lines)
    assert "80% range" in lines[2]


def _report_module():  # type: ignore[no-untyped-def]
    return bench_script("validation_report")


def test_change_error_cancels_what_two_rows_share() -> None:
    """Synthetic: an error common to every row of a box cancels in a ratio; only same-load, other-layout pairs
    count for `tpot`."""
    vr = _report_module()
    pred = np.array([1.0, 2.0, 4.0, 1.0, 3.0])
    box = np.array(["a", "a", "a", "b", "b"], dtype=object)
    meas = pred * np.where(box == "a", 1.7, 0.6)  # each box off by its own factor: every ratio still exact
    keys = {"box": box, "load": np.array(["c1"] * 5, dtype=object),
            "layout": np.array(["tp1", "tp2", "tp4", "tp1", "tp2"], dtype=object)}
    out = vr.change_error(pred, meas, keys)
    assert out["tpot"] == pytest.approx([1.0, 1.0]) and out["pairs"] == 8  # 3·2 ordered in a, 2 in b
    meas2 = meas.copy()
    meas2[1] *= 1.5  # one row 50 % slower than predicted: its pairs are off by 1.5 or 1/1.5
    out2 = vr.change_error(pred, meas2, keys)
    assert out2["tpot"][0] < 1.0 < out2["tpot"][1]
    keys["load"] = np.array(["c1", "c2", "c1", "c1", "c1"], dtype=object)  # row 1 at another load: not same-load
    out3 = vr.change_error(pred, meas2, keys)
    assert out3["pairs"] == 4 and out3["tpot"] == pytest.approx([1.0, 1.0])
    assert out3["pairs_any_setting"] == 8
