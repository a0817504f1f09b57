"""HTML report: self-contained, figures drawn from the analysis (checked against stdlib reads of the raw trace),
plan and curve with a scenario; the shared --format / -o options (atomic writes, aliases, one-line errors)."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import markupsafe
import pytest
from click.testing import CliRunner

from independent import gpu_events, raw_events
from servescope.advise import overview
from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.report.html import document_html, plotly_js
from servescope.report.overview_doc import overview_document

EXAMPLE = example_trace()
DECODE = Path(__file__).parents[1] / "data/traces/tracelens/inference/vllm_decode_full/graph_execution.json.gz"
SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200", "--tp", "8"]
MAX_BYTES = 6_000_000
FIGURE = re.compile(r'<script type="application/json" id="(fig\d+)-spec">(.*?)</script>', re.S)


def figures(page: str) -> dict[str, dict[str, Any]]:
    return {m.group(1): json.loads(m.group(2)) for m in FIGURE.finditer(page)}


def titled(page: str, prefix: str) -> dict[str, Any]:
    found = [f for f in figures(page).values() if f["layout"]["title"]["text"].startswith(prefix)]
    assert len(found) == 1, [f["layout"]["title"]["text"] for f in figures(page).values()]
    return found[0]


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("html") / "report.html"
    result = CliRunner().invoke(main, ["report", str(EXAMPLE), *SCENARIO, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_report_is_one_self_contained_file(report_page: str) -> None:
    assert len(report_page.encode()) <= MAX_BYTES
    assert "Content-Security-Policy" in report_page and "default-src 'none'" in report_page
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", report_page)
    assert "Plotly.newPlot" in report_page and plotly_js() in report_page  # the chart library, inlined
    order = [report_page.index(f'<section id="{s}">') for s in
             ("findings", "classes", "timeline", "collectives", "occupancy", "calibration", "plan")]
    assert order == sorted(order), "findings first, the plan last"


def test_timeline_holds_every_kernel_of_the_step(report_page: str) -> None:
    """The example has one prefill step: its timeline shows every GPU event of the raw file, spanning the
    first start to the last end (stdlib json read of the trace)."""
    raw = gpu_events(raw_events(EXAMPLE))
    fig = titled(report_page, "prefill step 0")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    assert sum(len(t["x"]) for t in bars) == len(raw)
    span = max(e["ts"] + e["dur"] for e in raw) - min(e["ts"] for e in raw)
    assert max(b + d for t in bars for b, d in zip(t["base"], t["x"], strict=True)) == pytest.approx(span, abs=0.01)
    nccl_like = sum(1 for e in raw if "all_reduce" in e["name"] or "allreduce" in e["name"].lower())
    marks = next(t for t in fig["data"] if t["name"] == "collective")
    assert len(marks["x"]) >= nccl_like > 0


def test_class_bars_are_the_documented_union_times(report_page: str) -> None:
    doc = overview_document(overview(EXAMPLE))
    kind = doc["trace"]["ranks"][0]["by_kind"][0]
    fig = titled(report_page, "time per step by class")
    shown = {t["name"]: t["y"][0] for t in fig["data"]}
    assert set(shown) == set(kind["classes"]) | {"idle"}
    for cls, us in kind["classes"].items():
        assert shown[cls] == pytest.approx(us / 1e3 / kind["steps"])
    assert shown["idle"] == pytest.approx(kind["idle_us"] / 1e3)


def test_plan_and_latency_throughput_curve(report_page: str) -> None:
    curve = titled(report_page, "latency–throughput")
    names = [t["name"] for t in curve["data"]]
    assert names[0] == "baseline" and len(names) >= 2
    gains = titled(report_page, "predicted gain")
    assert gains["data"][0]["x"] and all(lo >= 0 for lo in gains["data"][0]["error_x"]["arrayminus"])
    # the baseline curve at concurrency 1 is the plan's baseline (objective tpot at concurrency 1)
    m = re.search(r"baseline(?: \(calibrated\))? TPOT ([\d.]+) ms", report_page)  # a trace calibrates it
    assert m is not None
    assert 1e3 / curve["data"][0]["x"][0] == pytest.approx(float(m.group(1)), abs=0.006)
    assert "measured vs modelled" in report_page and "NVIDIA B200" in report_page


def test_decode_trace_with_graph_replays(tmp_path: Path) -> None:
    page = document_html(overview_document(overview(DECODE)))
    assert len(page.encode()) <= MAX_BYTES
    fig = titled(page, "decode step")
    raw = gpu_events(raw_events(DECODE))
    assert 0 < sum(len(t["x"]) for t in fig["data"] if t["type"] == "bar") <= len(raw)


@pytest.mark.parametrize("args", [
    ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1,8"],
    ["plan", "--model", "llama-3.1-8b", "--gpu", "h100"],
    ["trace", str(EXAMPLE)],
    ["specs", "show", "h100"],
])
def test_every_command_renders_html(args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    result = CliRunner().invoke(main, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and len(page.encode()) <= MAX_BYTES
    for f in figures(page).values():
        assert any(t.get("x") or t.get("y") for t in f["data"]), f["layout"]["title"]


def test_json_alias_format_and_suffix_agree(tmp_path: Path) -> None:
    args = ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1,8"]
    a = CliRunner().invoke(main, [*args, "--json"]).stdout
    b = CliRunner().invoke(main, [*args, "--format", "json"]).stdout
    assert a == b and json.loads(a)["schema"] == "servescope.model/1"
    CliRunner().invoke(main, [*args, "-o", str(tmp_path / "m.json")])
    assert (tmp_path / "m.json").read_text() == a
    CliRunner().invoke(main, [*args, "-o", str(tmp_path / "m.csv")])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "m.csv").read_text())))
    assert [float(r["tpot_ms"]) for r in rows] == [p["tpot_ms"] for p in json.loads(a)["points"]]


def test_trace_csv_rows_match_the_json(tmp_path: Path) -> None:
    doc = json.loads(CliRunner().invoke(main, ["trace", str(EXAMPLE), "--json"]).stdout)
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(main, ["trace", str(EXAMPLE), "--format", "csv"]).stdout)))
    step = doc["ranks"][0]["steps"][0]
    classes = {r["name"]: float(r["time_us"]) for r in rows if r["section"] == "class"}
    assert classes == pytest.approx(step["classes"])
    colls = {r["name"]: int(r["calls"]) for r in rows if r["section"] == "collective"}
    assert colls == {k: v["calls"] for k, v in step["collectives"].items()}


def test_conflicting_flags_are_one_line() -> None:
    result = CliRunner().invoke(main, ["specs", "list", "--json", "--format", "csv"])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1


def test_output_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while rendering leaves the previous file as it was and no temporary file behind."""
    out = tmp_path / "r.html"
    out.write_text("previous")

    def boom(doc: dict[str, Any]) -> str:
        raise ValueError("renderer failed")

    monkeypatch.setattr("servescope.report.render.to_html", boom)
    with pytest.raises(ValueError):
        CliRunner().invoke(main, ["specs", "show", "h100", "-o", str(out)], catch_exceptions=False)
    assert out.read_text() == "previous" and sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    bad = tmp_path / "no-such-dir" / "r.json"
    result = CliRunner().invoke(main, ["specs", "list", "-o", str(bad)])
    assert result.exit_code == 1 and str(bad) in result.output and not bad.exists()


def test_missing_html_libraries_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """jinja2 and plotly are base dependencies; an install that lacks one still gets one line, not a traceback."""
    monkeypatch.setitem(sys.modules, "jinja2", None)
    result = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--format", "html"])
    assert result.exit_code == 1 and "needs jinja2 and plotly" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_plan_page_states_the_target_verdict(tmp_path: Path) -> None:
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--target", "2ms"]
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    CliRunner().invoke(main, [*args, "-o", str(tmp_path / "p.html")])
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert doc["target"]["reachable"] is False
    assert f"target 2 ms: not reachable ({doc['target']['gap']:.2f}× short)" in page
    curve = titled(page, "latency–throughput")  # baseline plus each paying track
    assert [c["name"] for c in curve["data"]][:1] == ["baseline"]
    assert {c["name"] for c in curve["data"]} >= {t["kind"] for t in doc["tracks"] if (t["gain"] or 0) > 1.001}
    for t in doc["tracks"]:  # every track's preconditions and validation gate are on the page
        for p in t["preconditions"]:
            assert str(markupsafe.escape(p)) in page
