"""`plan TRACE` reuses the trace analysis (one load, through analysis.analyze_trace) and carries its warnings into
the plan, in text and JSON. The trace is the bundled real B200 vLLM trace (TraceLens, MIT), cut short here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import servescope.analysis.ranks
from servescope.advise import advise
from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.perfmodel import Scenario

SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = gzip.decompress(example_trace().read_bytes())
    path = tmp_path_factory.mktemp("plan") / "cut.json"
    path.write_bytes(data[: int(len(data) * 0.97)])  # kernels sit at the end of this file; keep most of them
    return path


def test_plan_carries_trace_warnings_and_loads_once(truncated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    real = servescope.analysis.ranks.load_rank_file

    def counting(path: str):  # type: ignore[no-untyped-def]
        loads.append(path)
        return real(path)

    monkeypatch.setattr(servescope.analysis.ranks, "load_rank_file", counting)
    sc = Scenario.build(model="gpt-oss-120b", gpu="b200_sxm", tp=8)
    advice = advise(sc, truncated)
    assert loads == [str(truncated)]
    assert advice.analysis is not None and advice.calibration is not None
    trace_warnings = [w for w in advice.plan.warnings if w.startswith("trace: ")]
    assert trace_warnings == [f"trace: {w}" for w in advice.analysis.warnings]
    assert any("truncated tail" in w for w in trace_warnings)


def test_plan_cli_text_and_json_show_trace_warnings(truncated: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(main, ["plan", str(truncated), *SCENARIO])
    assert text.exit_code == 0, text.stderr
    assert "warning: trace: truncated tail" in text.stdout
    doc = runner.invoke(main, ["plan", str(truncated), *SCENARIO, "--json"])
    assert doc.exit_code == 0
    assert any(w.startswith("trace: truncated tail") for w in json.loads(doc.stdout)["warnings"])
    assert "servescope: warning: trace: truncated tail" in doc.stderr


def test_plan_on_an_intact_trace_has_no_trace_warnings() -> None:
    sc = Scenario.build(model="gpt-oss-120b", gpu="b200_sxm", tp=8)
    advice = advise(sc, example_trace())
    assert not [w for w in advice.plan.warnings if w.startswith("trace: ")]
