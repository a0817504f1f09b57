"""`--measured` on model, plan, sweep, simulate and report (issue 17 parts 1, 2, 6): one option and one parse
path; benchmark result files as well as typed figures; the plan's gains on the measured baseline; the curves
through the measured points. Expectations are computed from the documents' own terms (the model is being
refitted: its numbers move, these relations must hold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.report.html_charts import latency_throughput, pareto

# the reference box runs a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`, the newest release's
# curves; issue 28): stock vLLM refuses it there (planner.allreduce_paths)
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16",
        "--engine-version", "+pcie-ar"]
BOTH = ["--measured", "tpot=12.1ms@c1", "--measured", "allreduce_share=0.40@c1"]  # reachable: test_figure_fit
SGLANG = Path(__file__).parents[1] / "data" / "bench_serve" / "datacrunch_h200_sglang_llama_3_3_70b_online_output.jsonl"


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    code, out, err = _run(*args, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def plan_doc() -> dict:  # type: ignore[type-arg]
    return _json("plan", *KIMI, "--forbid", "quantization", *BOTH)


def test_every_command_shares_one_option() -> None:
    from servescope.cli._measured import MEASURED_HELP

    for cmd in ("model", "simulate", "sweep", "plan", "report"):
        code, out, _ = _run(cmd, "--help")
        assert code == 0 and "--measured" in out and " ".join(MEASURED_HELP.split()[:4]) in " ".join(out.split())


def test_model_the_all_reduce_term_carries_the_share() -> None:
    doc = _json("model", *KIMI, "--concurrency", "1,64", *BOTH)
    p = doc["points"][0]
    assert p["tpot_ms"] == pytest.approx(12.1, rel=0.01)
    assert sum(p["terms_ms"].values()) == pytest.approx(p["tpot_ms"], rel=1e-9)
    assert p["collectives"]["all_reduce"]["time_ms"] / p["decode_step_ms"] == pytest.approx(0.40, abs=0.01)
    cal = doc["calibration"]
    assert "collective_latency" in [k["name"] for k in cal["knobs"]]
    assert cal["terms"]["collective_latency"]["status"] == "set" and cal["terms"]["collective_bw"]["status"] == "prior"
    assert cal["status"].startswith("fitted, not validated")
    assert cal["points"] == [{"concurrency": 1, "tpot_ms": pytest.approx(12.1), "output_tok_s": None,
                              "figures": ["tpot=12.1ms@c1"]}]


def test_plan_states_each_gain_on_the_measured_baseline(plan_doc: dict) -> None:  # type: ignore[type-arg]
    assert plan_doc["baseline"]["tpot_ms"] == pytest.approx(12.1, rel=0.01) and plan_doc["calibrated"]
    m = plan_doc["measured"]
    assert m["baseline"] == "measured"
    for t in plan_doc["tracks"]:
        if t["gain"] is None:
            continue
        said = m["tracks"][t["kind"]]
        assert said["before"] == pytest.approx(12.1, rel=0.01)
        b = said["before"]
        assert said["after"] == pytest.approx(b / t["gain"], rel=1e-6)
        assert (said["after_low"], said["after_high"]) == pytest.approx((b / t["gain_high"], b / t["gain_low"]))
    code, text, _ = _run("plan", *KIMI, "--forbid", "quantization", *BOTH)
    car = next(t for t in plan_doc["tracks"] if t["kind"] == "custom_allreduce")
    line = next(x for x in " ".join(text.split()).split("   ") if "custom_allreduce [" in x)
    said = m["tracks"]["custom_allreduce"]
    assert car["gain"] > 1.0
    want = (f"measured TPOT 12.1 ms → {said['after']:.3g} ms ({said['after_low']:.3g}–{said['after_high']:.3g})")
    assert code == 0 and want in line
    assert "calibrated on measured figures (fitted, not validated (" in " ".join(text.split())


def test_the_curves_pass_through_the_measured_points(plan_doc: dict) -> None:  # type: ignore[type-arg]
    pts = plan_doc["measured"]["curve_points"]
    assert pts[0]["tok_s_per_user"] == pytest.approx(1 / 0.0121, rel=0.01)
    assert pts[0]["tok_s_per_gpu"] == pytest.approx(1 / 0.0121 / 8, rel=0.01) and pts[0]["output_from"] == "batch / TPOT"
    fig = latency_throughput([{"name": "baseline", "points": [pts[0] | {"concurrency": 1}]}], pts)
    marker = fig["data"][-1]
    assert marker["name"] == "measured" and marker["mode"] == "markers" and marker["x"] == [pts[0]["tok_s_per_user"]]
    assert pareto([], pts)["data"][-1]["name"] == "measured"
    sweep = _json("sweep", *KIMI, "--concurrency", "4,16", *BOTH)
    base = {p["concurrency"]: p for p in sweep["points"] if p["layout"] == "TP8"}
    assert base[1]["tpot_ms"] == pytest.approx(12.1, rel=0.01)  # the measured concurrency joins the grid
    assert sweep["measured"]["layout"] == "TP8" and sweep["measured"]["curve_points"][0]["concurrency"] == 1
    code, text, _ = _run("sweep", *KIMI, "--concurrency", "4,16", *BOTH)
    assert code == 0 and "measured point: concurrency 1: TPOT 12.10 ms (tpot=12.1ms@c1)" in text


def test_a_result_file_calibrates_like_its_figures() -> None:
    """The real SGLang file (Poisson runs, no TPOT in its schema): each run's output tok/s at its Little's-law
    concurrency, the runs at other lengths set aside with a note."""
    lines = [json.loads(x) for x in SGLANG.read_text().splitlines() if x.strip()]
    base = ["--model", "llama-3.1-70b", "--gpu", "h200", "--tp", "4", "--isl", "509", "--osl", "534",
            "--backend", "sglang"]  # the file's runs say backend sglang: a vLLM scenario is refused (issue 26.6)
    code, out, err = _run("model", *base, "--concurrency", "8", "--measured", str(SGLANG), "--json")
    assert code == 0, err
    cal = json.loads(out)["calibration"]
    first = lines[0]
    c = round(first["completed"] / first["duration"] * first["mean_e2e_latency_ms"] / 1e3)
    assert cal["used"][0] == f"output={first['output_throughput']:.6g}tok/s@c{c},isl=509,osl=534"
    assert "Little's law" in err and "set aside" in err and "pass --isl" in err
    assert len(cal["used"]) == sum(abs(d["total_input_tokens"] / d["completed"] - 509) <= 0.05 * 509
                                   and abs(d["total_output_tokens"] / d["completed"] - 534) <= 0.05 * 534
                                   for d in lines)


def test_bad_measurements_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "run.json"
    bad.write_text(json.dumps({"date": "20260101-000000", "completed": 10, "mean_tpot_ms": 10.0}))
    for args, says in (
        (["--measured", str(bad)], "missing keys duration, total_input_tokens, total_output_tokens"),
        (["--measured", "tpot=12.1ms@c1", "--measured", "tpot=20ms@c1"], "contradict each other"),
        (["--measured", "nosuchfile.json"], "no such file, and not a typed figure"),
        (["--measured", "tpot=12.1hr@c1"], "known: s, ms, us, µs"),
        (["--measured", "speed=3@c1"], "known: tpot, ttft, itl, e2e, spec_tpot, output, request_rate"),
    ):
        code, out, err = _run("model", *KIMI, *args)
        assert code == 1 and says in err and len(err.strip().splitlines()) == 1 and not out, (args, err)
    code, _, err = _run("report", str(bad), "--measured", "tpot=12.1ms@c1", "-o", str(tmp_path / "r.html"))
    assert code == 1 and "--measured calibrates the model: give --model and --gpu" in err


def test_simulate_runs_each_decode_step_at_the_measured_level() -> None:
    small = ["--model", "llama-3.1-8b", "--gpu", "h100", "--isl", "256", "--osl", "64", "--concurrency", "4",
             "--num-prompts", "24"]
    model = _json("model", *small[:8], "--concurrency", "4")
    level = 9.0 / model["points"][0]["tpot_ms"]
    doc = _json("simulate", *small, "--measured", "tpot=9ms@c4")
    assert doc["measured"]["decode_level"] == pytest.approx(level, rel=0.01)
    assert doc["measured"]["level_at_concurrency"] == 4
    raw = _json("simulate", *small)
    assert doc["tpot_ms"]["p50"] == pytest.approx(level * raw["tpot_ms"]["p50"], rel=0.02)
