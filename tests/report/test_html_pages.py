"""One page per result that carries everything (issue 20 part 3): the scenario and every warning of the text output
at the top of the page, the sweep's Pareto chart and table, the simulated run's percentiles and its batch/KV chart,
the trace's top kernels, legends clear of the axis titles, numbers in engineering units; `report` refuses to print
HTML to a terminal and an unknown -o suffix."""

from __future__ import annotations

import gzip
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.report.html_sections import caveats, fmt

# the reference box runs a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`, the newest release's
# curves; issue 28): stock vLLM refuses it there (planner.allreduce_paths)
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16",
        "--engine-version", "+pcie-ar"]
B200 = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]
FIGURE = re.compile(r'<script type="application/json" id="(fig\d+)-spec">(.*?)</script>', re.S)
WARNINGS = re.compile(r'<section id="warnings" class="warnings">(.*?)</section>', re.S)


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled real B200 trace (TraceLens, MIT) cut short: its analysis warns of a truncated tail."""
    data = gzip.decompress(example_trace().read_bytes())
    path = tmp_path_factory.mktemp("pages") / "cut.json"
    path.write_bytes(data[: int(len(data) * 0.97)])
    return path


def page(args: list[str], tmp_path: Path, name: str = "page.html") -> str:
    out = tmp_path / name
    result = CliRunner().invoke(main, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def page_warnings(text: str) -> list[str]:
    block = WARNINGS.search(text)
    return [] if block is None else [html.unescape(w) for w in re.findall(r'<li class="warning">(.*?)</li>',
                                                                           block.group(1), re.S)]


def figures(text: str) -> list[dict[str, Any]]:
    return [json.loads(m.group(2)) for m in FIGURE.finditer(text)]


def test_plan_warnings_of_text_and_html_are_the_same(truncated: Path, tmp_path: Path) -> None:
    args = ["plan", str(truncated), *B200]
    text = " ".join(CliRunner().invoke(main, args).stdout.split())  # the terminal wraps long lines
    shown = page(args, tmp_path)
    warned = page_warnings(shown)
    assert any(w.startswith("trace: truncated tail") for w in warned)
    assert text.count("warning: ") == len(warned) and all(f"warning: {' '.join(w.split())}" in text for w in warned)
    assert shown.index("<section id=") == shown.index('<section id="warnings"')  # the first section


def test_report_page_carries_the_trace_and_plan_warnings(truncated: Path, tmp_path: Path) -> None:
    shown = page(["report", str(truncated), *B200], tmp_path)
    doc = json.loads(CliRunner().invoke(main, ["report", str(truncated), *B200, "--format", "json"]).stdout)
    warned = page_warnings(shown)
    assert warned == caveats(doc)
    for w in doc["trace"]["warnings"]:
        assert w in warned
    for w in doc["plan"]["warnings"]:
        assert w in warned or w.removeprefix("trace: ") in warned
    assert "b200_sxm" in shown and 'id="scenario"' in shown


def test_trace_page_warnings_and_top_kernels(truncated: Path, tmp_path: Path) -> None:
    shown = page(["trace", str(truncated), "--format", "html"], tmp_path)
    doc = json.loads(CliRunner().invoke(main, ["trace", str(truncated), "--json"]).stdout)
    assert doc["warnings"] and page_warnings(shown) == doc["warnings"]
    assert '<section id="kernels">' in shown and "top kernels" in shown


def test_plan_page_shows_the_scenario_the_paragraph_and_speed_ups(tmp_path: Path) -> None:
    shown = page(["plan", *KIMI, "--forbid", "quantization", "--target", "3ms", "--format", "html"], tmp_path)
    scenario = re.search(r'<p class="scenario" id="scenario">(.*?)</p>', shown, re.S)
    assert scenario is not None
    for words in ("kimi-k2.5", "rtx_pro_6000_server", "TP=8", "experts int4-w4a16", "engine vllm"):
        assert words in scenario.group(1)
    doc = json.loads(CliRunner().invoke(main, ["plan", *KIMI, "--forbid", "quantization", "--target", "3ms",
                                              "--json"]).stdout)
    ep = next(t for t in doc["tracks"] if t["kind"] == "expert_parallel")
    assert ep["gain"] < 1 and f"{ep['gain']:.2f}× (slower)" in shown and "1.00–1.00" not in shown
    assert re.search(r"= \d\.\d\d× alone: they overlap", shown)
    assert f"max conc. {doc['memory_limit']['max_concurrency']}" in shown


def test_sweep_page_is_a_pareto_chart_and_table(tmp_path: Path) -> None:
    shown = page(["sweep", *KIMI, "--format", "html"], tmp_path)
    doc = json.loads(CliRunner().invoke(main, ["sweep", *KIMI, "--json"]).stdout)
    (fig,) = figures(shown)
    assert fig["layout"]["title"]["text"].startswith("Pareto front")
    front = next(t for t in fig["data"] if t["name"] == "Pareto front")
    assert len(front["x"]) == sum(p["on_front"] for p in doc["points"])
    assert "<h3>the Pareto front</h3>" in shown and "<th>field</th>" not in shown
    assert page_warnings(shown) == [f"skipped {s}" for s in doc["skipped"]]


def test_simulate_page_has_percentiles_and_the_batch_kv_chart(tmp_path: Path) -> None:
    args = ["simulate", *KIMI, "--concurrency", "16", "--num-prompts", "50"]
    shown = page([*args, "--format", "html"], tmp_path)
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert "<h3>latency percentiles</h3>" in shown
    assert f"<td class=\"num\">{doc['ttft_ms']['p99']:,.2f}</td>" in shown
    (fig,) = figures(shown)
    assert fig["layout"]["title"]["text"] == "batch and KV cache over time"
    assert {t["name"] for t in fig["data"]} == {"running (batch)", "waiting", "KV used %"}
    assert page_warnings(shown) == doc["warnings"] and doc["warnings"]
    assert not re.search(r"\d\.\d{9,}", shown.split("<script")[0])  # no 17-digit floats in the page's text


def test_legends_sit_clear_of_the_axes(tmp_path: Path) -> None:
    shown = page(["report", str(example_trace()), *B200], tmp_path)
    figs = figures(shown) + figures(page(["model", *KIMI, "--format", "html"], tmp_path, "m.html"))
    for f in figs:
        legend = f["layout"]["legend"]
        assert legend["orientation"] == "v" and legend["x"] >= 1.0, f["layout"]["title"]


def test_cells_are_in_engineering_units(tmp_path: Path) -> None:
    assert fmt(0.000117) == "0.000117" and fmt(0.0) == "0.000" and fmt(12.3456) == "12.346"
    shown = page(["report", str(example_trace()), *B200], tmp_path)
    assert "<td>launch_overhead_s</td><td>117 µs</td>" in shown and "0.000117" not in shown


def test_report_refuses_a_terminal_and_an_unknown_suffix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import servescope.cli.report_cmd as report_cmd

    monkeypatch.setattr(report_cmd, "_stdout_is_terminal", lambda: True)
    r = CliRunner().invoke(main, ["report", str(example_trace())])
    assert r.exit_code != 0 and r.stdout == "" and "-o report.html" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    pdf = tmp_path / "x.pdf"
    r = CliRunner().invoke(main, ["report", str(example_trace()), "-o", str(pdf)])
    assert r.exit_code != 0 and not pdf.exists()
    assert "unknown suffix '.pdf'" in r.stderr and ".html (html)" in r.stderr
    ok = CliRunner().invoke(main, ["report", str(example_trace()), "--format", "json"])  # piped: fine
    assert ok.exit_code == 0 and json.loads(ok.stdout)["schema"] == "servescope.report/1"


def test_report_takes_the_plan_options_its_page_names(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["report", str(example_trace()), *B200, "--acceptance", "0.7,0.5,0.3",
                                  "--forbid", "quantization", "--format", "json"])
    assert r.exit_code == 0, r.output
    spec = next(t for t in json.loads(r.stdout)["plan"]["tracks"] if t["kind"] == "speculative_decoding")
    assert spec["applicable"], spec["why_not"]
