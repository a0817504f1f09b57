"""Plan text a reader can follow (issue 20 part 2): the paragraph first (baseline, combination, ceiling, verdict),
gains that combine shown as a product with the interaction named from the numbers, a baseline extrapolated from a
prefill step labelled so, one memory limit (the number `servescope model` prints), `×` always a speed-up, and no
range that rounds to one number."""

from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner

from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.report.plan_text import combination_product, eng_seconds, gain_text, speedup_text

# the reference box runs a vLLM build that allows custom all-reduce on 8 PCIe GPUs (`+pcie-ar`, the newest release's
# curves; issue 28): stock vLLM refuses it there (planner.allreduce_paths)
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16",
        "--engine-version", "+pcie-ar"]
README = [*KIMI, "--forbid", "quantization", "--target", "3ms"]


@pytest.fixture(scope="module")
def kimi_text() -> list[str]:
    result = CliRunner().invoke(main, ["plan", *README])
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split()).split(" tracks (gain on")  # [paragraph, tracks]


@pytest.fixture(scope="module")
def kimi_doc() -> dict:  # type: ignore[type-arg]
    return json.loads(CliRunner().invoke(main, ["plan", *README, "--json"]).stdout)


def test_the_paragraph_comes_before_the_tracks(kimi_text: list[str]) -> None:
    head, tracks = kimi_text
    for words in ("baseline: TPOT", "combined:", "ceiling:", "target 3ms: not reachable"):
        assert words in head
    assert head.index("baseline:") < head.index("combined:") < head.index("ceiling:") < head.index("target 3ms")
    assert "speculative_decoding [config change]" in tracks and "speculative_decoding [config change]" not in head


def test_combined_gain_is_the_product_with_the_interaction_named(kimi_text: list[str], kimi_doc: dict) -> None:  # type: ignore[type-arg]
    c = kimi_doc["combined"]
    gains = {t["kind"]: t["gain"] for t in kimi_doc["tracks"]}
    shown = [round(gains[k], 2) for k in c["tracks"]]
    product = round(math.prod(shown), 2)
    word = "overlap" if product > round(c["gain"], 2) else "compound"
    assert kimi_doc["combined_product"] == {"gains": shown, "product": product, "interaction": word}
    assert word == "overlap"  # 1.60 × 1.17 × 1.16 = 2.17 alone vs 1.83 together
    expected = f"{' × '.join(f'{g:.2f}x' for g in shown)} = {product:.2f}x alone: they {word}"
    assert expected in kimi_text[0] and f"({c['gain']:.2f}x on TPOT together;" in kimi_text[0]


def test_one_memory_limit_the_number_model_prints(kimi_text: list[str], kimi_doc: dict) -> None:  # type: ignore[type-arg]
    model = json.loads(CliRunner().invoke(main, ["model", *KIMI, "--concurrency", "1", "--json"]).stdout)
    limit = model["points"][0]["max_concurrency"]
    assert kimi_doc["memory_limit"]["max_concurrency"] == limit
    text = " ".join(kimi_text)
    assert f"max conc. {limit}" in text and "(the memory limit)" not in text
    assert f"memory limit: max conc. {limit}" in kimi_text[0]
    checked = next(t for t in kimi_doc["tracks"] if t["kind"] == "speculative_decoding")
    assert checked["gain"] > 1


def test_a_slowdown_says_so_and_a_flat_range_is_not_a_range(kimi_text: list[str]) -> None:
    tracks = kimi_text[1]
    assert re.search(r"0\.\d\dx \(slower; 0\.\d\d–\d\.\d\d\) expert_parallel", tracks)  # EP does not pay at batch 1
    assert gain_text(1.0, 1.0, 1.0).strip() == "1.00x (no change)"
    assert gain_text(1.05, 1.05, 1.05).strip() == "1.05x (no range)"
    assert gain_text(1.6, 1.19, 2.03).strip() == "1.60x (1.19–2.03)"
    assert speedup_text(0.97) == "0.97x (slower)" and speedup_text(1.73) == "1.73x"
    assert "(1.00–1.00)" not in tracks


def test_a_prefill_calibrated_baseline_is_labelled_extrapolated() -> None:
    args = ["plan", str(example_trace()), "--model", "gpt-oss-120b", "--gpu", "b200", "--tp", "8"]
    text = " ".join(CliRunner().invoke(main, args).stdout.split())
    head = text.split(" tracks (gain on")[0]
    assert "extrapolated from one 888-token prefill step (its GPU idle 86% of the span; no decode step measured)" \
        in head
    assert "launch_overhead_s = 117 µs" in text and "0.000117" not in text  # engineering units
    assert "×1.00" not in text  # the old unlabelled "measured step ×1.00"
    doc = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    assert doc["baseline_source"].startswith("extrapolated from one 888-token prefill step")
    assert doc["calibration"]["measured_step_idle_share"] == pytest.approx(0.863, abs=0.002)


def test_eng_seconds() -> None:
    assert eng_seconds(0.000117) == "117 µs" and eng_seconds(0.00212) == "2.12 ms" and eng_seconds(1.65) == "1.65 s"
    assert eng_seconds(2e-8) == "20 ns"


def test_a_single_track_has_no_product() -> None:
    from servescope.perfmodel import Scenario
    from servescope.planner import plan

    p = plan(Scenario.build("llama-3.1-8b", "h100", tp=1), forbid="quantization")
    assert (combination_product(p) is None) == (len(p.combined.tracks) < 2)
