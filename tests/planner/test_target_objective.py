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


@pytest.mark.parametrize(("text", "tpot_ms"), [("100tok/s/user", 10.0), ("50 tps/user", 20.0),
                                               ("250tokens/s/user", 4.0)])
def test_a_rate_per_user_is_a_tpot(text: str, tpot_ms: float) -> None:
    assert implied_objective(text, None) == "tpot"
    goal = parse_target(text, "tpot")
    assert goal.objective == "tpot" and goal.value == pytest.approx(tpot_ms) and not goal.aggregate
    with pytest.raises(PlanError, match="rate per user"):
        parse_target(text, "throughput")


@pytest.fixture(scope="module")
def aggregate_doc() -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["plan", *SCENARIO, "--target", "1000tok/s", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_an_aggregate_rate_target_has_no_per_user_cap(aggregate_doc: dict) -> None:  # type: ignore[type-arg]
    doc = aggregate_doc
    assert doc["objective"] == "throughput" and doc["aggregate"] is True and doc["tpot_limit_ms"] is None
    t = doc["target"]
    # the verdict names its point: a concurrency and the per-user TPOT there, and its rate meets the target
    assert t["concurrency"] >= 1 and t["tpot_ms"] > 0
    assert t["output_tok_s"] == pytest.approx(t["concurrency"] / (t["tpot_ms"] / 1e3), rel=1e-9)
    if t["reachable"]:
        assert t["output_tok_s"] >= 1000.0 and f"concurrency {t['concurrency']}" in t["text"]
    # and the same rate read per user is answered too, as a TPOT of 1 ms at concurrency 1
    assert t["per_user"].startswith("per user, 1000tok/s is a TPOT of 1 ms at concurrency 1")


def test_the_aggregate_baseline_is_the_models_own_curve(aggregate_doc: dict) -> None:  # type: ignore[type-arg]
    """The plan's baseline point (no track) is a point of `servescope model`'s curve at its concurrency: the same
    TPOT; the model's output tok/s also charges each request's TTFT, so it is a few percent lower."""
    b = aggregate_doc["baseline"]
    model = CliRunner().invoke(main, ["model", *SCENARIO, "--concurrency", str(b["concurrency"]), "--json"])
    (point,) = json.loads(model.stdout)["points"]
    assert point["tpot_ms"] == pytest.approx(b["tpot_ms"], rel=1e-6)
    assert 0.9 * b["output_tok_s"] <= point["output_tok_s"] <= b["output_tok_s"] * (1 + 1e-9)


def test_a_per_user_rate_beyond_the_floor_says_unreachable_with_the_floor() -> None:
    result = CliRunner().invoke(main, ["plan", *SCENARIO, "--target", "1000tok/s/user", "--json"])
    doc = json.loads(result.stdout)
    assert doc["objective"] == "tpot" and doc["target"]["reachable"] is False
    assert "ceiling at 100% efficiency" in doc["target"]["text"] and doc["target"]["per_user"] is None
    assert doc["ceiling"]["tpot_ms"] > 1.0  # 1000 tok/s per user is a 1 ms TPOT, below the floor


def test_a_combined_point_above_the_limit_says_so() -> None:
    text = CliRunner().invoke(main, ["plan", *SCENARIO, "--target", "1000tok/s", "--tpot-limit", "1ms"]).output
    flat = " ".join(text.split())  # the terminal wraps long lines
    combined = flat[flat.index("combined:"):flat.index("ceiling:")]
    assert "above the TPOT limit of 1.00 ms even at concurrency 1" in combined
