"""`diff` that knows what it compares (issue 20 part 5): GPUs, step sources, warnings, verdicts, the CI gate.

Real pairs: HTA trace_diff control (A100) / test (V100), and nsys-ai mfu_2gpu_before/after (unlabelled idle-gap
segments, 2 ranks). Verdicts are recomputed here from the per-step GPU spans with `statistics`."""

from __future__ import annotations

import json
import statistics

import pytest
from click.testing import CliRunner

from independent import DATA
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.diff import ALL_KERNELS, diff_analyses
from servescope.cli import main

HTA = DATA / "traces" / "hta" / "trace_diff"
CONTROL, TEST = HTA / "control" / "control.json.gz", HTA / "test" / "test.json.gz"
NSYS = DATA / "traces" / "nsys-ai"
NSYS_BEFORE, NSYS_AFTER = NSYS / "mfu_2gpu_before.sqlite", NSYS / "mfu_2gpu_after.sqlite"


def _diff_json(*args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["diff", *args, "--json"])
    return r.exit_code, json.loads(r.stdout)


@pytest.fixture(scope="module")
def hta_json() -> tuple[int, dict]:
    """`diff control test --json`, run once for the module (read by two tests; none changes it)."""
    return _diff_json(str(CONTROL), str(TEST))


def _mad(xs: list[float]) -> float:
    m = statistics.median(xs)
    return statistics.median([abs(x - m) for x in xs])


def _independent_verdict(b: list[float], a: list[float]) -> str:
    if len(b) < 2 or len(a) < 2:
        return "cannot tell"
    delta = statistics.median(a) - statistics.median(b)
    if abs(delta) <= 3 * (_mad(b) + _mad(a)) or delta == 0:
        return "no change"
    return "improved" if delta < 0 else "regressed"


def test_hta_pair_names_both_gpus_and_warns(hta_json: tuple[int, dict]) -> None:
    code, doc = hta_json
    assert code == 0 and doc["schema"] == "servescope.diff/1"
    assert doc["before"]["gpus"] == ["NVIDIA A100-PG509-200"]
    assert doc["after"]["gpus"] == ["Tesla V100-SXM2-16GB"]
    assert doc["before"]["step_sources"] == {"profiler_step": 6} and doc["compared"] == "profiler steps"
    assert doc["shared_label_patterns"] >= 1
    assert any("GPUs differ" in w and "A100" in w and "V100" in w for w in doc["warnings"])
    for k in doc["kinds"]:  # the existing keys are all still there
        assert {"kind", "steps_before", "steps_after", "classes", "collectives", "kernels"} <= set(k)
        assert k["verdict"] in ("improved", "regressed", "no change", "cannot tell")
        for c in k["collectives"].values():
            assert {"before_calls", "after_calls", "before_median_us", "after_median_us", "ratio",
                    "significant", "before_us", "after_us", "step_ratio", "step_significant"} <= set(c)
    text = CliRunner().invoke(main, ["diff", str(CONTROL), str(TEST)], env={"COLUMNS": "200"}).stdout
    head = text.split("\n\n")[0]
    assert "A100-PG509-200" in head and "V100-SXM2-16GB" in head and "GPUs differ" in head
    assert "per call" in text and "per step" in text and "0.52x" in text and "2.45x" in text


def test_collective_per_call_and_per_step_side_by_side(hta_json: tuple[int, dict]) -> None:
    code, doc = hta_json
    assert code == 0
    ar = doc["kinds"][0]["collectives"]["all_reduce"]
    assert ar["ratio"] < 1 < ar["step_ratio"]  # the 0.52x per call / 2.45x per step of the issue, now in one row
    assert ar["step_ratio"] == pytest.approx(ar["after_us"] / ar["before_us"], rel=1e-3)


def test_nsys_pair_verdicts_agree_with_per_step_times() -> None:
    before, after = analyze_trace(NSYS_BEFORE, top_n=ALL_KERNELS), analyze_trace(NSYS_AFTER, top_n=ALL_KERNELS)
    d = diff_analyses(before, after)
    assert d.compared == "GPU segments"
    assert any("neither trace has step labels" in w for w in d.warnings)
    assert d.before is not None and d.before.ranks == 2 and d.before.step_sources == {
        "idle_gap": sum(len(b.steps) for b in before.ranks)}
    for k in d.kinds:
        spans_b = [s.gpu_span_us for b in before.ranks for s in b.steps if s.kind == k.kind]
        spans_a = [s.gpu_span_us for b in after.ranks for s in b.steps if s.kind == k.kind]
        assert k.verdict == _independent_verdict(spans_b, spans_a)
        assert k.span_us.before == pytest.approx(statistics.mean(spans_b))
    code, doc = _diff_json(str(NSYS_BEFORE), str(NSYS_AFTER))
    assert [k["verdict"] for k in doc["kinds"]] == [k.verdict for k in d.kinds]
    assert doc["kinds"][0]["step_time"]["before_us"] == pytest.approx(d.kinds[0].span_us.before, abs=1e-3)


def test_hta_verdict_is_independent_regression() -> None:
    before, after = analyze_trace(CONTROL), analyze_trace(TEST)
    d = diff_analyses(before, after)
    spans = ([s.gpu_span_us for s in before.ranks[0].steps], [s.gpu_span_us for s in after.ranks[0].steps])
    assert [k.verdict for k in d.kinds] == [_independent_verdict(*spans)] == ["regressed"]


def test_fail_on_regression_exit_codes() -> None:
    run = CliRunner().invoke
    assert run(main, ["diff", str(CONTROL), str(TEST), "--json", "--fail-on-regression", "10"]).exit_code == 3
    # swapped: the same pair improved
    assert run(main, ["diff", str(TEST), str(CONTROL), "--json", "--fail-on-regression", "10"]).exit_code == 0
    # regressed, but by less than the threshold
    assert run(main, ["diff", str(CONTROL), str(TEST), "--json", "--fail-on-regression", "500"]).exit_code == 0
    # no change beyond noise
    assert run(main, ["diff", str(NSYS_AFTER), str(NSYS_BEFORE), "--json", "--fail-on-regression", "0"]).exit_code == 0
    assert "exit" in run(main, ["diff", "--help"]).stdout.lower()
