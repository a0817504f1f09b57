"""`servescope verify`: a plan scored against typed figures, traces and benchmark files; the campaign log.

Expected verdicts are computed here from the plan document's own fields and from independently measured values
(tests/independent.py reads the traces with stdlib json), never from servescope's verify code."""

from __future__ import annotations

import functools
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from fuzz_inputs import check_cli
from independent import DATA, gpu_events
from servescope.cli import main
from servescope.report.verify_text import render_verify

# the reference box runs a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`, the newest release's
# curves; issue 28): stock vLLM refuses it there (planner.allreduce_paths)
REFERENCE_BOX = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16",
                 "--engine-version", "+pcie-ar"]
CONTROL = DATA / "traces/hta/trace_diff/control/control.json.gz"
TEST = DATA / "traces/hta/trace_diff/test/test.json.gz"
EAGLE3 = ["--before", "tpot=12.1ms@c1", "--after", "tpot=9.17ms@c1"]  # the reference box, batch 1 (issue 17)


def _run(args: list[str]) -> Any:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("verify") / "plan.json"
    _run(["plan", *REFERENCE_BOX, "--json", "-o", str(path)])
    return path


@pytest.fixture(scope="module")
def plan_doc(plan_file: Path) -> dict[str, Any]:
    return json.loads(plan_file.read_text())


def _verify_json(plan_file: Path, *args: str) -> dict[str, Any]:
    return json.loads(_run(["verify", str(plan_file), *args, "--json"]).stdout)


def _expected(measured: float, low: float, high: float) -> str:
    return "inside" if low <= measured <= high else "above" if measured > high else "below"


def _track(plan_doc: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(t for t in plan_doc["tracks"] if t["kind"] == kind)


def test_eagle3_pair_against_the_speculative_track(plan_file: Path, plan_doc: dict[str, Any]) -> None:
    doc = _verify_json(plan_file, *EAGLE3, "--applied", "speculative_decoding")
    t = _track(plan_doc, "speculative_decoding")
    measured = 12.1 / 9.17
    assert doc["schema"] == "servescope.verify/1" and doc["objective"] == "tpot" == plan_doc["objective"]
    assert doc["measured_gain"] == pytest.approx(measured)
    assert doc["before"] == {"value": pytest.approx(12.1), "unit": "ms", "source": "tpot=12.1ms@c1", "kind": "figure",
                             "detail": "typed figure tpot=12.1ms@c1", "concurrency": 1}
    row = doc["tracks"][0]
    assert (row["kind"], row["gain"], row["gain_low"], row["gain_high"]) == (
        "speculative_decoding", t["gain"], t["gain_low"], t["gain_high"])
    want = _expected(measured, t["gain_low"], t["gain_high"])
    assert row["verdict"] == doc["check"]["verdict"] == want
    assert doc["check"]["basis"] == "track" and doc["applied_from"] == "named"
    assert doc["baseline"]["value"] == pytest.approx(plan_doc["baseline"]["tpot_ms"])


def test_eagle3_pair_against_the_plans_combination(plan_file: Path, plan_doc: dict[str, Any]) -> None:
    """--applied combined: the combination the plan chose, scored on its combined gain with the widest relative
    range of the plan's range rule (cross-validated: gain / q90 … gain / q10) and the tracks' own."""
    doc = _verify_json(plan_file, *EAGLE3, "--applied", "combined")
    chosen = plan_doc["combined"]["tracks"]
    assert doc["applied"] == chosen and doc["applied_from"] == "plan_combined"
    g, rng = plan_doc["combined"]["gain"], plan_doc["range"]
    assert rng["basis"] == "cross_validated"
    tracks = [_track(plan_doc, k) for k in chosen]
    low = g * min(1 / rng["gain_ratio_q90"], *(t["gain_low"] / t["gain"] for t in tracks))
    high = g * max(1 / rng["gain_ratio_q10"], *(t["gain_high"] / t["gain"] for t in tracks))
    c = doc["check"]
    assert (c["gain"], c["gain_low"], c["gain_high"]) == pytest.approx((g, low, high))
    assert c["basis"] == ("plan_combined" if len(chosen) > 1 else "track")
    assert c["verdict"] == _expected(12.1 / 9.17, low, high)
    assert all(t["verdict"] is None for t in doc["tracks"]) or len(chosen) == 1


def test_text_output_says_the_verdict(plan_file: Path) -> None:
    out = _run(["verify", str(plan_file), *EAGLE3, "--applied", "speculative_decoding"]).stdout
    assert "measured gain: 1.320x (TPOT before / after)" in out
    assert "verdict: inside — speculative_decoding: measured 1.32x vs predicted" in out


@functools.cache
def _raw(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


@functools.cache  # the pair is read by several tests
def _independent_step_ms(path: Path) -> float:
    """Mean GPU span of the ProfilerStep#N steps: kernels attributed to a step by their launch's correlation id."""
    events = _raw(path)["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("ph") == "X"
              and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = [k for k in gpu_events(events) if k.get("args", {}).get("correlation") in launch]
    spans = []
    for s in steps:
        mine = [k for k in kernels if s["ts"] <= launch[k["args"]["correlation"]] <= s["ts"] + s["dur"]]
        spans.append(max(k["ts"] + k["dur"] for k in mine) - min(k["ts"] for k in mine))
    return sum(spans) / len(spans) / 1e3


@pytest.mark.parametrize(("before", "after"), [(CONTROL, TEST), (TEST, CONTROL)])
def test_shared_before_after_traces(plan_file: Path, plan_doc: dict[str, Any], before: Path, after: Path) -> None:
    doc = _verify_json(plan_file, "--before", str(before), "--after", str(after), "--applied", "custom_allreduce")
    b, a = _independent_step_ms(before), _independent_step_ms(after)
    assert doc["before"]["value"] == pytest.approx(b, rel=1e-9) and doc["after"]["value"] == pytest.approx(a, rel=1e-9)
    assert doc["before"]["kind"] == "trace" and "no decode steps" in doc["before"]["detail"]
    t = _track(plan_doc, "custom_allreduce")
    assert doc["measured_gain"] == pytest.approx(b / a, rel=1e-9)
    want = _expected(b / a, t["gain_low"], t["gain_high"])
    assert doc["check"]["verdict"] == want and want in ("below", "above")  # 0.49x one way, 2.04x the other
    assert any("A100" in w and "V100" in w for w in doc["warnings"])  # HTA's pair ran on two GPUs


def test_shared_traces_without_applied_find_what_changed(plan_file: Path, plan_doc: dict[str, Any]) -> None:
    """HTA's control → test: test ran on 2 ranks (control 8) and replays CUDA graphs (control none); the plan prices
    a layout change and calls CUDA graphs already on, so the layout change is scored and the graphs are said."""
    raw = {side: _raw(side) for side in (CONTROL, TEST)}
    world = {p: d["distributedInfo"]["world_size"] for p, d in raw.items()}
    graphs = {p: sum(e.get("name") == "cudaGraphLaunch" for e in d["traceEvents"])
              / sum(str(e.get("name", "")).startswith("ProfilerStep#") for e in d["traceEvents"]) for p, d in raw.items()}
    assert (world[CONTROL], world[TEST], graphs[CONTROL], graphs[TEST]) == (8, 2, 0.0, 2.0)
    doc = _verify_json(plan_file, "--before", str(CONTROL), "--after", str(TEST))
    assert doc["applied"] == ["parallelism_change"] and doc["applied_from"] == "found"
    assert doc["found"] == [{"kind": "parallelism_change", "evidence": f"world size {world[CONTROL]} → {world[TEST]}"}]
    t = _track(plan_doc, "parallelism_change")
    b, a = _independent_step_ms(CONTROL), _independent_step_ms(TEST)
    assert doc["check"]["verdict"] == _expected(b / a, t["gain_low"], t["gain_high"])
    note = next(w for w in doc["warnings"] if w.startswith("found cuda_graphs"))
    assert f"graph launches {graphs[CONTROL]:.1f} → {graphs[TEST]:.1f} per step" in note
    assert "not applicable" in note and _track(plan_doc, "cuda_graphs")["gain"] is None
    buf = io.StringIO()
    render_verify(doc, Console(file=buf, width=200))  # the text of the same document (no second analysis)
    text = buf.getvalue()
    assert "(found from what changed between the traces)" in text and "found parallelism_change: world size 8 → 2" in text


def test_traces_that_show_no_known_change_ask_for_applied(plan_file: Path) -> None:
    before, after = DATA / "traces/nsys-ai/mfu_2gpu_before.sqlite", DATA / "traces/nsys-ai/mfu_2gpu_after.sqlite"
    result = CliRunner().invoke(main, ["verify", str(plan_file), "--before", str(before), "--after", str(after)])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "no applied track found to score: none of the changes servescope recognises" in result.stderr
    assert "--applied KIND[,KIND] (or --applied combined" in result.stderr


def test_benchmark_result_files(plan_file: Path, plan_doc: dict[str, Any], tmp_path: Path) -> None:
    def bench(name: str, tpot_ms: float) -> Path:
        p = tmp_path / name
        p.write_text(json.dumps({"date": "20260101-000000", "endpoint_type": "openai", "completed": 100,
                                 "duration": 60.0, "total_input_tokens": 102400, "total_output_tokens": 51200,
                                 "max_concurrency": 1, "request_rate": "inf", "mean_tpot_ms": tpot_ms,
                                 "mean_ttft_ms": 300.0, "output_throughput": 1000.0 / tpot_ms}))
        return p

    doc = _verify_json(plan_file, "--before", str(bench("before.json", 12.0)), "--after",
                       str(bench("after.json", 10.5)), "--applied", "custom_allreduce")
    t = _track(plan_doc, "custom_allreduce")
    assert doc["before"]["kind"] == "benchmark" and doc["measured_gain"] == pytest.approx(12.0 / 10.5)
    assert doc["check"]["verdict"] == _expected(12.0 / 10.5, t["gain_low"], t["gain_high"])


def test_campaign_log(plan_file: Path, plan_doc: dict[str, Any], tmp_path: Path) -> None:
    log = tmp_path / "campaign.jsonl"
    plan_bytes = plan_file.read_bytes()
    first = _verify_json(plan_file, *EAGLE3, "--applied", "speculative_decoding", "--log", str(log))
    second = _verify_json(plan_file, "--before", "tpot=9.17ms@c1", "--after", "tpot=9.1ms@c1", "--applied",
                          "custom_allreduce", "--log", str(log))
    assert plan_file.read_bytes() == plan_bytes  # inputs never rewritten
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["schema"] == "servescope.verify/1" for x in lines)
    assert all("logged_at" in json.loads(x) for x in lines)

    # independently: each verdict from the plan's numbers, the hit rate from the verdicts
    ca = _track(plan_doc, "custom_allreduce")
    spec = _track(plan_doc, "speculative_decoding")
    verdicts = [_expected(12.1 / 9.17, spec["gain_low"], spec["gain_high"]),
                _expected(9.17 / 9.1, ca["gain_low"], ca["gain_high"])]
    assert [first["check"]["verdict"], second["check"]["verdict"]] == verdicts

    doc = json.loads(_run(["verify", "--log", str(log), "--json"]).stdout)
    assert doc["schema"] == "servescope.campaign/1" and [e["n"] for e in doc["entries"]] == [1, 2]
    assert [e["verdict"] for e in doc["entries"]] == verdicts
    assert [e["tracks"] for e in doc["entries"]] == [["speculative_decoding"], ["custom_allreduce"]]
    assert doc["scored"] == 2 and doc["inside"] == verdicts.count("inside")
    assert doc["hit_rate"] == pytest.approx(verdicts.count("inside") / 2)
    assert doc["start"]["value"] == pytest.approx(12.1) and doc["now"]["value"] == pytest.approx(9.1)
    assert doc["entries"][1]["since_start"] == pytest.approx(12.1 / 9.1)  # the chain: 12.1 → 9.17 → 9.1
    assert doc["total_gain"] == pytest.approx(12.1 / 9.1) and doc["warnings"] == []

    text = _run(["verify", "--log", str(log)]).stdout
    assert "campaign" in text and "2 verification(s)" in text
    assert f"ranges hit: {verdicts.count('inside')} of 2 inside" in text
    assert "TPOT: 12.10 ms at the start → 9.10 ms now" in text
    csv = _run(["verify", "--log", str(log), "--format", "csv"]).stdout.splitlines()
    assert csv[0].startswith("n,logged_at,plan,") and len(csv) == 3


def test_csv_and_html(plan_file: Path, tmp_path: Path) -> None:
    csv = _run(["verify", str(plan_file), *EAGLE3, "--applied", "combined", "--format", "csv"]).stdout.splitlines()
    assert csv[0].startswith("plan,objective,unit,before,after,kind,gain")
    assert csv[-1].split(",")[-1] in ("plan_combined", "track")
    pytest.importorskip("jinja2")
    page = tmp_path / "v.html"
    _run(["verify", str(plan_file), *EAGLE3, "--applied", "combined", "-o", str(page)])
    html = page.read_text()
    assert "Plan vs measured" in html and "verdict:" in html


def test_the_log_is_never_an_input(plan_file: Path) -> None:
    before = plan_file.read_bytes()
    result = CliRunner().invoke(main, ["verify", str(plan_file), *EAGLE3, "--applied", "speculative_decoding",
                                       "--log", str(plan_file)])
    assert result.exit_code == 1 and "the log is an input of this verification" in result.stderr
    assert plan_file.read_bytes() == before


@pytest.mark.parametrize("args", [
    ["verify"],
    ["verify", "--log", "{tmp}/none.jsonl"],
    ["verify", "{plan}"],
    ["verify", "{plan}", "--before", "tpot=12.1ms@c1"],
    ["verify", "{plan}", "--before", "tpot=12.1@c1", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", "--before", "speed=1ms@c1", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", "--before", "output=100tok/s@c1", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", "--before", "tpot=12ms@c1", "--before", "tpot=13ms@c1", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", "--before", "nope.json", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", *EAGLE3, "--applied", "warp_drive"],
    ["verify", "{plan}", *EAGLE3, "--applied", "cuda_graphs"],  # not applicable in this plan
    ["verify", "{plan}", *EAGLE3],  # typed figures do not say what changed: --applied is needed
    ["verify", "{tmp}/bad.json", *EAGLE3],
    ["verify", "{tmp}/trace.json", *EAGLE3],
    ["verify", "{tmp}/nokeys.json", *EAGLE3],
    ["verify", "--log", "{tmp}/bad.json"],
    ["verify", "--log", "{plan}"],
    ["verify", "--log", "{tmp}/x.jsonl", "--before", "tpot=1ms@c1"],
    ["verify", "{plan}", "--before", "{tmp}/bad.json", "--after", "tpot=9ms@c1"],
    ["verify", "{plan}", *EAGLE3, "--log", "{tmp}"],
])
def test_bad_input_is_one_line(args: list[str], plan_file: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "trace.json").write_text(json.dumps({"schema": "servescope.trace/1"}))
    (tmp_path / "nokeys.json").write_text(json.dumps({"schema": "servescope.plan/1", "objective": "tpot"}))
    (tmp_path / "x.jsonl").write_text("")
    full = [a.replace("{plan}", str(plan_file)).replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, full)
    assert result.exit_code == 1, (full, result.stdout)
    assert check_cli(full) is None


def test_missing_plan_key_names_file_and_key(tmp_path: Path) -> None:
    p = tmp_path / "nokeys.json"
    p.write_text(json.dumps({"schema": "servescope.plan/1", "objective": "tpot", "concurrency": 1}))
    result = CliRunner().invoke(main, ["verify", str(p), *EAGLE3])
    assert result.stderr.strip() == (f"servescope: {p}: not a plan document: missing key tracks (write one with "
                                     "`servescope plan … --json -o plan.json`)")
