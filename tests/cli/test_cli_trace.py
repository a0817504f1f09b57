"""`servescope trace` as a user meets it: the bundled example, --json, and one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from independent import DATA
from servescope.cli import main

B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"


def test_bundled_example_runs_without_arguments() -> None:
    result = CliRunner().invoke(main, ["trace"])
    assert result.exit_code == 0, result.output
    assert "prefill" in result.output and "all_reduce" in result.output


def test_json_is_one_document_with_the_contract() -> None:
    result = CliRunner().invoke(main, ["trace", str(B200), "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["schema"] == "servescope.trace/1"
    (rank,) = doc["ranks"]
    (step,) = rank["steps"]
    for key in ("index", "label", "kind", "batch_size", "tokens", "gpu_busy_us", "gpu_span_us", "classes",
                "collectives"):
        assert key in step
    assert set(step["collectives"]["all_reduce"]) >= {"calls", "total_us", "median_us"}
    for f in doc["findings"]:
        assert set(f) >= {"code", "severity", "message", "evidence"}


def test_kind_filter() -> None:
    doc = json.loads(CliRunner().invoke(main, ["trace", str(B200), "--json", "--kind", "decode"]).stdout)
    assert doc["ranks"][0]["steps"] == []


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "servescope", *args], capture_output=True, text=True, timeout=60)


def test_errors_are_one_line_exit_1(tmp_path: Path) -> None:
    not_json = tmp_path / "notes.json"
    not_json.write_text("this is not a trace")
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    cpu_only = tmp_path / "cpu.json.gz"
    with gzip.open(cpu_only, "wt") as fh:
        json.dump({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                                    "ts": 1.0, "dur": 2.0}]}, fh)
    for path in (tmp_path / "missing.json", not_json, empty, cpu_only):
        result = _run("trace", str(path))
        assert result.returncode == 1, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path.name) in lines[0], result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""


def test_cli_step_kinds_are_the_analysis_vocabulary() -> None:
    import click

    from servescope import analysis
    from servescope.cli import main

    for name in ("trace", "diff", "report"):
        kind = next(p for p in main.commands[name].params if p.name == "kind")
        assert isinstance(kind.type, click.Choice) and tuple(kind.type.choices) == analysis.STEP_KINDS


def test_short_kernel_names_for_tables() -> None:
    from servescope.report.trace_text import short_name

    assert short_name("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                      "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)") == \
        "fused_add_rms_norm_kernel"
    assert short_name("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
                      "flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>>>>>(flash::Params)") == \
        "FlashAttnFwdSm90"
    assert short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"
