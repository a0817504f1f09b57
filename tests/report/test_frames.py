"""DataFrames from Python: steps_frame / kernels_frame / collectives_frame of a TraceAnalysis, points_frame, short reprs.

Expected values are computed here from the B200 trace with stdlib json (768 kernel events in its one step; 73
`multimem_all_reduce_kernel` calls, see tests/data/README.md) and from the result objects' own fields."""

from __future__ import annotations

import importlib.util
import tomllib
from importlib import resources
from pathlib import Path

import polars as pl
import pytest

import servescope
from independent import DATA, gpu_events, raw_events
from servescope.report.frames import (
    collectives_frame,
    kernels_frame,
    points_frame,
    roofline_frame,
    steps_frame,
)

B200 = DATA / "traces" / "tracelens" / "b200" / "eager_trace.json.gz"
PAIR = DATA / "traces" / "hta" / "trace_filter"


@pytest.fixture(scope="module")
def analysis() -> servescope.TraceAnalysis:
    return servescope.analyze_trace(B200, top_n=10_000)


def test_steps_frame(analysis: servescope.TraceAnalysis) -> None:
    steps = steps_frame(analysis)
    assert steps.height == 1 and steps["kind"].to_list() == ["prefill"]
    gpu = gpu_events(raw_events(B200))
    assert steps["kernels"][0] == len(gpu)
    assert steps["kernel_sum_us"][0] == pytest.approx(sum(e["dur"] for e in gpu), rel=1e-9)
    class_cols = [c for c in steps.columns if c.endswith("_us") and c.removesuffix("_us") in
                  analysis.ranks[0].steps[0].classes_us]
    assert class_cols and steps.select(class_cols).row(0) == tuple(analysis.ranks[0].steps[0].classes_us.values())


def test_kernels_and_collectives_frames(analysis: servescope.TraceAnalysis) -> None:
    gpu = gpu_events(raw_events(B200))
    kernels = kernels_frame(analysis)
    assert kernels["calls"].sum() == len(gpu)  # top_n large: every kernel name of the step
    assert kernels.filter(pl.col("name").str.contains("multimem_all_reduce"))["calls"].sum() == sum(
        1 for e in gpu if "multimem_all_reduce" in e["name"])
    colls = collectives_frame(analysis)
    row = colls.filter(pl.col("collective") == "all_reduce").row(0, named=True)
    durs = sorted(e["dur"] for e in gpu if "multimem_all_reduce" in e["name"])
    assert row["calls"] == 73 == len(durs)
    assert row["total_us"] == pytest.approx(sum(durs), rel=1e-9)


def test_roofline_frame(analysis: servescope.TraceAnalysis) -> None:
    """One row per kernel with a shape; its FLOPs from the raw Input Dims (36 addmm [888,2880]×[2880,640], bf16),
    its achieved rate and its fraction of the B200 datasheet peak (2.25 PFLOP/s dense bf16, specs/data/gpus)."""
    roof = roofline_frame(analysis)
    assert servescope.roofline_frame is roofline_frame and roof.height > 0
    assert roof["shaped_calls"].min() > 0 and (roof["shaped_us"] <= roof["total_us"] + 1e-9).all()
    row = roof.filter(pl.col("name") == "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT").row(0, named=True)
    assert row["flops"] == 36 * 2 * 888 * 640 * 2880 and row["bound"] == "compute" and row["gpu"] == "b200_sxm"
    assert row["achieved_flop_per_s"] == pytest.approx(row["flops"] / (row["shaped_us"] * 1e-6), rel=1e-9)
    bf16 = tomllib.loads((resources.files("servescope.specs") / "data/gpus/b200_sxm.toml").read_text())
    peak = bf16["flops"]["bf16"]["value_tflops"] * 1e12
    assert row["frac_of_peak"] >= row["achieved_flop_per_s"] / peak - 1e-12  # ≥: the roofline max() with bytes
    # B200's reference: aiconfigurator's measured GEMM curve at the shape (specs/data/opcurves), ≥ the roofline
    assert row["achievable_us"] >= row["flops"] / peak * 1e6 * (1 - 1e-9) and row["frac_of_achievable"] > 0


def test_frames_of_a_rank_folder_have_one_row_per_rank_step() -> None:
    a = servescope.analyze_trace(PAIR)
    steps = steps_frame(a)
    assert steps.height == sum(len(b.steps) for b in a.ranks) and set(steps["rank"].to_list()) == {0, 1}
    assert steps.select("rank", "step").is_duplicated().sum() == 0


def test_points_frame_terms_add_up() -> None:
    sc = servescope.Scenario.build(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16")
    points = servescope.predict(sc, [1, 16, 64])
    frame = points_frame(points)
    assert frame["concurrency"].to_list() == [1, 16, 64]
    terms = [c for c in frame.columns if c.endswith("_s") and c.removesuffix("_s") in points[0].terms_s]
    assert len(terms) == len(points[0].terms_s)
    for row, p in zip(frame.iter_rows(named=True), points, strict=True):
        assert sum(row[t] for t in terms) == pytest.approx(p.tpot_s, rel=1e-9)
        assert row["output_tok_s"] == p.output_tok_s


def test_empty_inputs_give_typed_empty_frames() -> None:
    assert points_frame([]).height == 0 and points_frame([]).schema["tpot_s"] == pl.Float64


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None or importlib.util.find_spec("pyarrow") is None,
                    reason="pandas + pyarrow not installed")
def test_to_pandas(analysis: servescope.TraceAnalysis) -> None:
    df = steps_frame(analysis).to_pandas()
    assert list(df.columns) == steps_frame(analysis).columns and len(df) == 1


def test_reprs_are_short(analysis: servescope.TraceAnalysis) -> None:
    text = repr(analysis)
    assert len(text) < 300 and "1 step(s)" in text and "eager_trace" in text


def test_py_typed_marker_ships_in_the_package() -> None:
    """PEP 561: the marker sits in the package folder, which the hatch wheel target ships whole
    (checked by hand: `pip wheel . --no-deps` lists servescope/py.typed)."""
    assert (resources.files("servescope") / "py.typed").is_file()
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/servescope"]


def test_result_reprs_are_a_few_hundred_characters(analysis: servescope.TraceAnalysis) -> None:
    from servescope.advise import advise
    from servescope.analysis.diff import diff_analyses

    sc = servescope.Scenario.build(model="gpt-oss-120b", gpu="b200_sxm", tp=8)
    advice = advise(sc, B200, objective="tpot", concurrency=1)
    b = analysis.ranks[0]
    objects = [analysis, b, b.steps[0], b.kinds[0], sc, sc.gpu, sc.model, advice, advice.plan,
               advice.calibration, servescope.predict(sc, [8])[0], diff_analyses(analysis, analysis)]
    lengths = {type(o).__name__: len(repr(o)) for o in objects}
    assert max(lengths.values()) < 400, lengths
    assert "gpt-oss-120b" in repr(sc) and "b200" in repr(sc.gpu).lower() and "prefill" in repr(b.steps[0])
