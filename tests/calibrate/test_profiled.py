"""A profiled trace beside an unprofiled TPOT (calibrate.profiled, issue 29 item 5): the real vLLM FULL-graph decode
trace (MI300X, gpt-oss-20b, 32 sequences; TraceLens, tests/data) with a TPOT measured at its batch."""

from __future__ import annotations

import pytest

from independent import DATA
from servescope.advise import figure_fit
from servescope.advise.calibration import trace_calibration
from servescope.analysis.breakdown import breakdown
from servescope.calibrate import calibrate
from servescope.calibrate.figures import parse_figures
from servescope.calibrate.profiled import PERTURBED, profiler_perturbation
from servescope.perfmodel import Efficiency, Scenario, decode_step
from servescope.trace import load_trace

DECODE = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
GPT_OSS_20B = DATA / "planner" / "openai--gpt-oss-20b_config.json"


@pytest.fixture(scope="module")
def case():  # type: ignore[no-untyped-def]
    b = breakdown(load_trace(DECODE))
    sc = Scenario.build(str(GPT_OSS_20B), "mi300x", tp=1, quant="native", isl=1000, osl=1443,
                        efficiency=Efficiency())
    return b, sc, calibrate(b, sc, context_len=55086 / 32)


def test_a_step_slower_than_the_tpot_speaks_through_its_shares(case) -> None:  # type: ignore[no-untyped-def]
    b, sc, cal = case
    step_s = b.steps[0].gpu_span_us / 1e6
    measured = cal.steps[0].measured_s
    tpot = measured["step"] / 1.3  # the profiled step 30 % over the unprofiled TPOT
    figs = parse_figures([f"tpot={tpot * 1e3:.4f}ms@c32"])
    p = profiler_perturbation(cal, figs, "trace")
    assert p is not None and p.batch == 32 and p.profiled_step_s == pytest.approx(measured["step"])
    want = {f"{c}_share": measured[c] / measured["step"] for c in ("gemm", "moe", "attention")
            if 0.01 < measured[c] / measured["step"] < 0.99}
    assert {f.metric: f.value_si for f in p.shares} == pytest.approx(want)
    assert step_s > 0
    fit = figure_fit(sc, cal, figs)
    assert fit is not None and fit.replaces_trace and trace_calibration(cal, fit) is None
    assert any("under the profiler" in n and "+30%" in n for n in fit.notes)
    d = decode_step(fit.apply(sc), 32, sc.isl + sc.osl // 2)
    assert d.step_time_s == pytest.approx(tpot, rel=0.05)  # the unprofiled TPOT, not the profiled step


def test_a_step_within_the_noise_calibrates_by_its_times(case) -> None:  # type: ignore[no-untyped-def]
    _, sc, cal = case
    tpot = cal.steps[0].measured_s["step"] / (1.0 + PERTURBED / 2)
    figs = parse_figures([f"tpot={tpot * 1e3:.4f}ms@c32"])
    assert profiler_perturbation(cal, figs, "trace") is None
    fit = figure_fit(sc, cal, figs)
    assert fit is not None and not fit.replaces_trace and trace_calibration(cal, fit) is cal
    # a TPOT at another concurrency says nothing about the profiled batch
    assert profiler_perturbation(cal, parse_figures(["tpot=1ms@c4"]), "trace") is None
