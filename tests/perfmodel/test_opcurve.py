"""perfmodel.opcurve: the lookups return the stored measurement at a measured point, interpolate and extrapolate by
the documented rules, match versions and shapes with a note, and say "no curve" rather than guess. Expected values
come from the raw JSON cells (read here with json, not through servescope) and the datasheets of specs/data/gpus."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench_scripts import ROOT
from servescope.perfmodel import opcurve as oc
from servescope.specs.hardware import load_gpu

R6K = "rtx_pro_6000_server"
DOC = json.loads((ROOT / f"src/servescope/specs/data/opcurves/{R6K}.json").read_text(encoding="utf-8"))


def _raw(op: str, engine: str, prefix: list[object]) -> tuple[dict[str, list[object]], list[object]]:
    """(axes, cells) of the raw row whose leading key values are `prefix`."""
    table = next(t for t in DOC["tables"] if t["op"] == op and t["engine"] == engine)
    row = next(r for r in table["rows"] if r[: len(prefix)] == prefix)
    return table["axes"], row[-1]


def test_gemm_at_a_measured_shape_is_the_stored_point_and_log_log_between() -> None:
    axes, cells = _raw("gemm", "vllm", ["bfloat16", 7168])
    k_i = axes["k"].index(2048)
    m_grid = axes["m"]
    stored_s = np.array(cells[k_i], dtype=float) * 1e-6
    got = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bfloat16", np.array(m_grid), 7168, 2048)
    assert got == pytest.approx(stored_s, rel=1e-9)
    # between two measured M: the geometric mean at the geometric-mean M (log-log linear)
    i = m_grid.index(512)
    m_mid = math.sqrt(512 * m_grid[i + 1])
    mid = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", m_mid, 7168, 2048)
    assert float(mid) == pytest.approx(math.sqrt(stored_s[i] * stored_s[i + 1]), rel=1e-9)
    # beyond the largest M: ∝ M (compute-bound roofline slope); below 1: the M = 1 floor
    top = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", [m_grid[-1], 4 * m_grid[-1], 0.5], 7168, 2048)
    assert top is not None and top[1] == pytest.approx(4 * top[0]) and top[2] == pytest.approx(stored_s[0])


def test_gemm_unmeasured_nk_scales_the_nearest_by_nk_and_says_so() -> None:
    exact = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", [1, 64, 4096], 7168, 2048)
    near = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", [1, 64, 4096], 7000, 2048)
    assert exact is not None and near == pytest.approx(exact * 7000 / 7168)
    text = oc.describe("gemm", R6K, "vllm", "0.24.0", dtype="bf16", n=7000, k=2048)
    assert "(7168, 2048)" in text and "N·K ratio" in text and "gemm_perf.parquet" in text


def test_gemm_physics_against_the_datasheet() -> None:
    """Large M: achieved FLOP/s below the dense peak; small M with weights ≫ L2: time ≥ weight bytes / HBM BW."""
    gpu = load_gpu(R6K)
    for dtype, peak, elem in (("bf16", "bf16", 2.0), ("fp8", "fp8", 1.0)):
        n, k = 16384, 7168                                   # 235 MB in bf16: 1.75x the 134 MB L2
        m = np.array([4096.0, 8192.0, 32768.0])
        t = oc.gemm_time_s(R6K, "vllm", "0.24.0", dtype, m, n, k)
        assert t is not None and np.all(2 * m * n * k / t < gpu.flops_per_s[peak])
        n, k = 65536, 16384                                  # 2.1 GB in bf16: 16x L2
        small = oc.gemm_time_s(R6K, "vllm", "0.24.0", dtype, np.arange(1, 17), n, k)
        assert small is not None and np.all(small >= n * k * elem / gpu.hbm_bw_bytes_per_s)


def test_moe_kimi_experts_measured_and_skew() -> None:
    """Kimi-K2.5's experts (7168 x 2048, 384 experts, top-8, int4 W4A16 Marlin) on vLLM at EP 8. The data says
    what skew does: a power-law load is not always slower — at 32-256 tokens it touches fewer distinct experts
    and reads fewer weights (faster); at 16384 tokens the hot rank's grouped GEMMs dominate (slower)."""
    args = (R6K, "vllm", "0.24.0", "int4-w4a16")
    shape = dict(hidden=7168, inter=2048, topk=8, experts=384, tp=1, ep=8)
    tokens = np.array([1, 32, 256, 16384])
    bal = oc.moe_time_s(*args, tokens, **shape, distribution="balanced")
    skew = oc.moe_time_s(*args, tokens, **shape, distribution="power_law_1.01")
    assert bal is not None and skew is not None
    axes, cells = _raw("moe", "vllm", ["int4_wo", 7168, 2048, 8, 384])
    ep8, grid = axes["moe_ep_size"].index(8), axes["num_tokens"]
    want = [cells[0][ep8][0][grid.index(int(x))] * 1e-6 for x in tokens]
    assert bal == pytest.approx(want, rel=1e-9)
    assert skew[0] == pytest.approx(bal[0], rel=0.1)         # one token routes to 8 experts either way
    assert skew[1] < bal[1] and skew[2] < bal[2] and skew[3] > bal[3]
    # 1 token at EP 8: the time of reading 8 of 48 local experts at least (0.5625 B/param with group-32 scales)
    expert_bytes = 3 * 7168 * 2048 * 0.5625
    assert bal[0] >= min(8, 384 // 8) * expert_bytes / 8 / load_gpu(R6K).hbm_bw_bytes_per_s


def test_moe_refuses_what_was_not_measured() -> None:
    assert oc.moe_time_s(R6K, "vllm", "0.24.0", "int4_wo", 8, 7168, 2048, 8, 384, tp=2, ep=4) is None
    assert "only pure TP or pure EP" in oc.describe("moe", R6K, "vllm", "0.24.0", dtype="int4_wo", hidden=7168,
                                                    inter=2048, topk=8, experts=384, tp=2, ep=4)
    assert "not in the measured grid" in oc.describe("moe", R6K, "vllm", "0.24.0", dtype="int4_wo", hidden=7168,
                                                     inter=2048, topk=8, experts=384, ep=16)
    assert oc.moe_time_s(R6K, "vllm", "0.24.0", "int4_wo", 8, 7168, 2048, 6, 160) is None  # no such family


def test_decode_attention_grid_point_heads_fallback_and_clamp() -> None:
    axes, cells = _raw("generation_attention", "vllm", ["bfloat16", 128, 32, 8])
    b_i, kv_i = axes["batch_size"].index(64), axes["kv_len"].index(4096)
    stored = cells[b_i][kv_i] * 1e-6
    t = oc.decode_attention_time_s(R6K, "vllm", "0.24.0", [64, 64], [4096, 8192], 32, 8, 128)
    assert t is not None and t[0] == pytest.approx(stored, rel=1e-9) and t[1] > t[0]
    # 40 query heads on 8 KV heads is not measured: the 32/8 curve, KV bytes the same (ratio 1)
    same = oc.decode_attention_time_s(R6K, "vllm", "0.24.0", 64, 4096, 40, 8, 128)
    assert float(same) == pytest.approx(stored)
    assert "num_heads=32" in oc.describe("decode_attention", R6K, "vllm", "0.24.0", num_heads=40, kv_heads=8,
                                         head_dim=128)
    # below the smallest measured batch and kv length: the floor
    floor = oc.decode_attention_time_s(R6K, "vllm", "0.24.0", [1, 0.5], [8, 2], 32, 8, 128)
    assert floor is not None and floor[1] == pytest.approx(floor[0])


def test_context_attention_extrapolates_quadratically_in_isl() -> None:
    t = oc.context_attention_time_s(R6K, "vllm", "0.24.0", 1, [16384, 65536], 32, 8, 128)
    assert t is not None and t[1] == pytest.approx(16 * t[0])   # isl 16384 is vLLM's longest measured prompt


def test_mla_module_and_kernel_where_each_exists() -> None:
    t = oc.mla_module_decode_time_s(R6K, "vllm", "0.24.0", [1, 32, 128], 4096, 8)
    assert t is not None and t[0] < t[1] < t[2]
    assert oc.mla_decode_time_s(R6K, "vllm", "0.24.0", 1, 4096, 8) is None  # vLLM ships the module only
    assert oc.describe("mla_decode", R6K, "vllm", "0.24.0", num_heads=8).startswith("no curve: datasheet")
    assert oc.mla_decode_time_s(R6K, "trtllm", "1.3.0rc20", 1, 4096, 8) is not None
    assert oc.mla_module_decode_time_s(R6K, "vllm", "0.24.0", 1, 4096, 12) is None  # module heads: exact only


def test_version_domains_and_gpu_names() -> None:
    """An older release than the measured one is outside the table's domain (issue 27): no curve, the reason said;
    only --op-curves transfer takes the nearest version, and says so. A newer patch of the series is answered."""
    exact = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", 8, 4096, 4096)
    assert exact is not None and oc.gemm_time_s(R6K, "vllm", "0.16.0", "bf16", 8, 4096, 4096) is None
    assert oc.gemm_time_s(R6K, "vllm", "0.24.3", "bf16", 8, 4096, 4096) == pytest.approx(exact)
    assert oc.gemm_time_s(R6K, "vllm", "0.25.0", "bf16", 8, 4096, 4096) is None  # a new series
    moved = oc.gemm_time_s(R6K, "vllm", "0.16.0", "bf16", 8, 4096, 4096, transfer=True)
    assert moved == pytest.approx(exact)
    note = oc.describe("gemm", R6K, "vllm", "0.16.0", dtype="bf16", n=4096, k=4096)
    assert note.startswith("no curve: datasheet (vllm 0.16.0 is outside") and "0.24.0 ≤ v" in note
    assert "0.24.0 transferred (--op-curves transfer)" in oc.describe("gemm", R6K, "vllm", "0.16.0", dtype="bf16",
                                                                     n=4096, k=4096, transfer=True)
    assert oc.known_versions("b200_sxm", "moe", "vllm") == ("0.19.0", "0.22.0", "0.24.0")
    assert oc.describe("moe", "b200_sxm", "vllm", "0.17.0", dtype="nvfp4", hidden=7168, inter=2048, topk=8,
                       experts=256).startswith("no curve")
    alias = oc.gemm_time_s("RTX PRO 6000", "vllm", "0.24.0", "bf16", 8, 4096, 4096)  # spec alias
    assert alias == pytest.approx(exact)
    assert oc.gemm_time_s("l40s", "vllm", "0.24.0", "bf16", 8, 4096, 4096) is None
    assert oc.describe("gemm", "l40s", "vllm", "0.24.0", dtype="bf16", n=4096, k=4096).startswith(
        "no curve: datasheet (no measured curves for GPU 'l40s'")


def test_a_10k_point_sweep_is_one_vectorised_lookup() -> None:
    """10,000 points priced in one call each, equal to the points priced one by one (the speed budget lives in
    bench/bench_model.py: sweeps above 10k points/s)."""
    rng = np.random.default_rng(0)
    batch, kv = rng.integers(1, 512, 10_000), rng.integers(1, 32_768, 10_000)
    t = oc.decode_attention_time_s(R6K, "vllm", "0.24.0", batch, kv, 8, 1, 128)
    g = oc.gemm_time_s(R6K, "vllm", "0.24.0", "bf16", batch, 7168, 2048)
    assert t is not None and g is not None and t.shape == g.shape == (10_000,) and np.all(t > 0)
    for i in (0, 4_999, 9_999):
        one = oc.decode_attention_time_s(R6K, "vllm", "0.24.0", batch[i:i + 1], kv[i:i + 1], 8, 1, 128)
        assert one is not None and float(one[0]) == pytest.approx(float(t[i]))
