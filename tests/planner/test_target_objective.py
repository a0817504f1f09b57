"""`--target 1000tok/s` implies the throughput objective (a rate target can only mean throughput); a latency
target or none keeps tpot; an explicit objective that contradicts the target still fails in one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import PlanError
from servescope.planner.target import implied_objective, parse_target

SCENARIO = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]


@pytest.mark.parametrize(("target", "objective", "expected"), [
    ("1000tok/s", None, "throughput"), ("1.5 ktok/s", None, "throughput"), ("800tps", None, "throughput"),
    ("8ms", None, "tpot"), (None, None, "tpot"), ("8ms", "throughput", "throughput"),
    ("1000tok/s", "tpot", "tpot"), ("nonsense", None, "tpot"),
])
def test_implied_objective(target: str | None, objective: str | None, expected: str) -> None:
    assert implied_objective(target, objective) == expected


def test_a_contradiction_still_fails() -> None:
    with pytest.raises(PlanError, match="is a rate but the objective is tpot"):
        parse_target("1000tok/s", implied_objective("1000tok/s", "tpot"))


def test_cli_rate_target_without_objective() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["plan", *SCENARIO, "--concurrency", "32", "--target", "1000tok/s", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["target"]["value"] == 1000.0
    explicit = runner.invoke(main, ["plan", *SCENARIO, "--concurrency", "32", "--target", "1000tok/s",
                                    "--objective", "throughput", "--json"])
    assert json.loads(explicit.stdout) == doc
    bad = runner.invoke(main, ["plan", *SCENARIO, "--target", "1000tok/s", "--objective", "tpot"])
    assert bad.exit_code == 1 and len(bad.output.strip().splitlines()) == 1
