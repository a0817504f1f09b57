"""`sweep --ttft-max/--tpot-max` (issue 30.4): the closed-form grid screened against an SLA, then only the passing
Pareto front simulated.

Expected sets are worked out by hand on synthetic points, or recomputed from the document's own closed-form numbers
(the screen is a comparison, the front a dominance check), never copied from the code's output.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario
from servescope.planner.layouts import Layout
from servescope.planner.sweep import Sla, Sweep, SweepPoint, screen, simulate_front, to_simulate

TP1 = Layout(1, 1, 1)


def _pt(c: int, per_gpu: float, per_user: float, ttft_ms: float) -> SweepPoint:
    tpot = 1.0 / per_user
    return SweepPoint(TP1, c, per_gpu, per_user, tpot, ttft_ms / 1e3, per_gpu)


# (concurrency, tok/s per GPU, tok/s per user, TTFT ms): TPOT = 1/per_user → 10, 12.5, 20, 40, 25 ms
POINTS = (_pt(1, 100, 100, 50), _pt(4, 300, 80, 90), _pt(16, 800, 50, 300), _pt(64, 1500, 25, 900),
          _pt(8, 250, 40, 100))


def test_screen_counts_and_flags() -> None:
    sw = screen(Sweep(1, POINTS, ()), Sla(ttft_max_s=0.4, tpot_max_s=0.030))
    # TTFT ≤ 400 ms and TPOT ≤ 30 ms: c1 (50, 10), c4 (90, 12.5), c16 (300, 20); c64 fails both, c8 TPOT 25 ok
    assert [p.sla_met for p in sw.points] == [True, True, True, False, True]
    assert (sw.screened, sw.passed) == (5, 4)
    # the front of the passing points: c8 (250/GPU, 40/user) is dominated by c4 (300, 80)
    assert to_simulate(sw) == [0, 1, 2]
    only_tpot = screen(Sweep(1, POINTS, ()), Sla(tpot_max_s=0.015))
    assert [p.sla_met for p in only_tpot.points] == [True, True, False, False, False]


def test_simulate_front_runs_only_the_front_and_notes_refusals() -> None:
    base = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1)
    sw = screen(Sweep(1, POINTS, ()), Sla(ttft_max_s=0.4, tpot_max_s=0.030))
    asked: list[int] = []

    def fake(sc: Scenario, c: int) -> Any:
        asked.append(c)
        if c == 16:
            raise ScenarioError("too big")
        stats = SimpleNamespace(mean_s=0.5 if c == 4 else 0.05, p99_s=0.6)
        tpot = SimpleNamespace(mean_s=0.011, p99_s=0.012)
        return SimpleNamespace(requests=200, ttft=stats, tpot=tpot, output_tok_s=123.0)

    out = simulate_front(base, sw, fake)
    assert asked == [1, 4, 16]
    assert out.simulated == 2 and len(out.notes) == 1 and "c16" in out.notes[0] and "too big" in out.notes[0]
    sims = {p.concurrency: p.simulated for p in out.points if p.simulated is not None}
    assert sorted(sims) == [1, 4]
    assert sims[1] is not None and sims[1].sla_met  # 50 ms TTFT, 11 ms TPOT
    assert sims[4] is not None and not sims[4].sla_met  # 500 ms simulated TTFT > 400


def test_cli_sla_sweep_document() -> None:
    args = ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--tp", "2", "--concurrency", "1,8,64",
            "--ttft-max", "300", "--tpot-max", "9", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    pts, sla = doc["points"], doc["sla"]
    passing = [p for p in pts if p["ttft_ms"] <= 300 and p["tpot_ms"] <= 9]
    assert sla["screened"] == len(pts) and sla["passed"] == len(passing) > 0
    assert [p["sla_met"] for p in pts] == [p in passing for p in pts]

    def dominated(p: dict[str, Any]) -> bool:
        return any(q["tok_s_per_gpu"] >= p["tok_s_per_gpu"] and q["tok_s_per_user"] >= p["tok_s_per_user"]
                   and (q["tok_s_per_gpu"], q["tok_s_per_user"]) != (p["tok_s_per_gpu"], p["tok_s_per_user"])
                   for q in passing)

    front = [p for p in passing if not dominated(p)]
    simulated = [p for p in pts if "simulated" in p]
    assert simulated == front and sla["simulated"] == len(front) < len(pts)
    for p in simulated:
        m = p["simulated"]
        assert m["requests"] == max(4 * p["concurrency"], 200)
        assert m["sla_met"] == (m["ttft_mean_ms"] <= 300 and m["tpot_mean_ms"] <= 9)


def test_cli_without_sla_is_unchanged() -> None:
    args = ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1,8", "--json"]
    doc = json.loads(CliRunner().invoke(main, args).stdout)
    assert "sla" not in doc and all("simulated" not in p and "sla_met" not in p for p in doc["points"])


@pytest.mark.parametrize("flag", ["--ttft-max", "--tpot-max"])
def test_cli_rejects_a_non_positive_bound(flag: str) -> None:
    result = CliRunner().invoke(main, ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", flag, "0"])
    assert result.exit_code != 0 and flag in result.output
