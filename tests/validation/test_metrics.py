"""validation.metrics: Prometheus scrapes of vLLM / SGLang /metrics into measured boundaries (issue 29.2).

Expected quantiles are worked by hand from the bucket counts of the sample scrapes (tests/data/metrics/README in
tests/data/README.md), with Prometheus' histogram_quantile rule: rank q·N, linear within the bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from servescope.errors import MeasurementError
from servescope.validation.metrics import Histogram, looks_like_metrics, read_metrics

DATA = Path(__file__).parent.parent / "data" / "metrics"


def test_vllm_v1_boundaries_by_hand() -> None:
    m = read_metrics(DATA / "vllm_v1_c16.prom")
    assert m.engine == "vllm"
    t = m.boundaries["ttft"]
    assert t.count == 100 and t.mean_s == pytest.approx(6.0 / 100)
    # p50: rank 50 reached in (0.04, 0.06] (10 → 50): 0.04 + 0.02·40/40
    assert t.p50_s == pytest.approx(0.06)
    # p90: rank 90 in (0.08, 0.1] (80 → 95): 0.08 + 0.02·10/15
    assert t.p90_s == pytest.approx(0.08 + 0.02 * 10 / 15)
    # p99: rank 99 in (0.1, 0.25] (95 → 100): 0.1 + 0.15·4/5
    assert t.p99_s == pytest.approx(0.22)
    q = m.boundaries["queue"]  # first bucket (0, 0.001] holds 40: rank 50 in (0.001, 0.005] (40 → 80)
    assert q.p50_s == pytest.approx(0.001 + 0.004 * 10 / 40)
    itl = m.boundaries["itl"]
    assert itl.series == "vllm:inter_token_latency_seconds"
    assert itl.mean_s == pytest.approx(0.018)
    assert itl.p50_s == pytest.approx(0.01 + 0.015 * 5000 / 9000)
    assert set(m.boundaries) == {"ttft", "queue", "prefill", "decode", "itl", "e2e"}
    assert m.running == 16 and m.kv_usage == pytest.approx(0.42)
    assert m.prefix_hit_rate == pytest.approx(25600 / 102400)
    assert m.mean_isl == pytest.approx(1024) and m.mean_osl == pytest.approx(101)


def test_older_vllm_names_and_label_sets_summed() -> None:
    m = read_metrics(DATA / "vllm_v0_two_models.prom")
    itl = m.boundaries["itl"]
    assert itl.series == "vllm:time_per_output_token_seconds"  # the older name, read as ITL
    assert itl.count == 200  # two label sets summed per le
    # 100 of 200 at ≤ 0.025: p50 rank 100 in (0.01, 0.025] (0 → 100) → 0.025; p90 rank 180 in (0.025, 0.05]
    assert itl.p50_s == pytest.approx(0.025)
    assert itl.p90_s == pytest.approx(0.025 + 0.025 * 80 / 100)
    assert m.running == 8  # running requests of the two label sets add up
    assert m.kv_usage == pytest.approx(0.3)  # a fraction: averaged
    assert m.series["kv_usage"] == "vllm:gpu_cache_usage_perc"


def test_sglang_scrape() -> None:
    m = read_metrics(DATA / "sglang_c8.prom")
    assert m.engine == "sglang" and m.running == 8 and m.prefix_hit_rate == pytest.approx(0.5)
    t = m.boundaries["ttft"]
    # rank 50 is past the 40 at le 0.06: it lies in (0.06, 0.08] (40 → 70)
    assert t.p50_s == pytest.approx(0.06 + 0.02 * 10 / 30)


def test_rank_in_the_inf_bucket_returns_the_highest_finite_bound() -> None:
    h = Histogram("x", ((0.1, 10.0), (0.2, 50.0), (float("inf"), 100.0)), 30.0, 100.0)
    assert h.quantile(0.99) == pytest.approx(0.2)
    assert h.quantile(0.05) == pytest.approx(0.05)  # first bucket from 0


@pytest.mark.parametrize("body, words", [
    ('{"ttft": 1}\n', "not Prometheus text"),
    ("this is not a metric line at all !!\n", "not Prometheus text"),
    ("# TYPE other_metric gauge\nother_metric 1\n", "none of the known"),
    ('vllm:time_to_first_token_seconds_bucket{le="0.1"} 5\nvllm:time_to_first_token_seconds_bucket{le="0.2"} 3\n'
     'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 5\n', "vllm:time_to_first_token_seconds: inconsistent"),
    ('vllm:time_to_first_token_seconds_bucket{le="0.1"} 5\n', "no le=\"+Inf\""),
    ('vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 5\nvllm:e2e_request_latency_seconds_count 7\n',
     "vllm:e2e_request_latency_seconds: inconsistent"),
    ("vllm:num_requests_running abc\n", "not a number"),
])
def test_bad_input_is_one_line_naming_file_and_series(tmp_path: Path, body: str, words: str) -> None:
    p = tmp_path / "scrape.prom"
    p.write_text(body)
    with pytest.raises(MeasurementError) as e:
        read_metrics(p)
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg and words in msg


def test_not_utf8_and_missing_are_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bin.prom"
    p.write_bytes(b"vllm:num_requests_running 1\n\xff\xfe\n")
    with pytest.raises(MeasurementError, match="not UTF-8"):
        read_metrics(p)
    with pytest.raises(MeasurementError, match="no such file"):
        read_metrics(tmp_path / "missing.prom")


def test_looks_like_metrics(tmp_path: Path) -> None:
    assert looks_like_metrics(DATA / "vllm_v1_c16.prom")
    j = tmp_path / "r.json"
    j.write_text('{"completed": 1}')
    assert not looks_like_metrics(j)
