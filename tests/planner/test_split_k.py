"""Split-K priced from a kernel's grid and per-CTA work (perfmodel.split_k, specs.decode_kernels,
analysis.sparse_decode, planner.split_k_track): the arithmetic by hand, a gain bounded by the straggler, a loss where the work is already
spread, and the two public before/after PRs.

Public numbers (tests/data/planner/split_k_pr44899.csv and the ledger's v54929 rows):
- vllm-project/vllm#54929: `_fused_gather_dequant_attn_kernel`, GLM-5.2 on RTX 5090 (170 SMs), T = 1, H = 8 heads per
  rank, top-k 2048 — 213 → 28.7 µs per call with split-K S = 16–32.
- vllm-project/vllm#44899: `_sparse_attn_decode_ragged_kernel`, DeepSeek-V4 on MI355X (256 CUs, the PR), 16 heads
  per rank, SWA ≤ 128 + top-k ≤ 1024 — 277 → 35 µs at batch 4 … 286 → 113 µs at batch 128. MI355X HBM3E bandwidth
  8 TB/s: AMD Instinct MI355X datasheet (amd.com, "8 TB/s peak memory bandwidth").
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from servescope.errors import ServescopeError
from servescope.perfmodel.efficiency import measured_kernel_overhead_s
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.split_k import SplitKernel
from servescope.perfmodel.split_k import sparse_decode_model as split_model
from servescope.planner.kernels import KernelEvidence, KernelRow, KindTime
from servescope.planner.pair_check import check_pairs
from servescope.planner.plan import plan
from servescope.planner.tracks import TRACK_KINDS
from servescope.specs.decode_kernels import shape_for as match
from servescope.validation.pairs import deployment, read_ledger

DATA = Path(__file__).parent.parent / "data" / "planner"
REDUCE_KERNEL_S = 1.98793e-6  # specs/data/engine_overheads.toml [vllm.graph] per_kernel_us
MI355X_SMS, MI355X_BW = 256, 8e12
KAPPA = 2e-6  # a round κ for the by-hand arithmetic
US = 1e-6


def _kernel(**kw: object) -> SplitKernel:
    base = dict(ctas=1, sms=100, call_s=100 * US, segments=(1024,), block=32, token_bytes=100.0,
                fixed_bytes=10_000.0, partial_bytes=5_000.0, bw_bytes_per_s=1e12, kernel_s=KAPPA)
    return SplitKernel(**(base | kw))  # type: ignore[arg-type]


def test_kappa_is_the_measured_graph_kernel_cost() -> None:
    # κ, one graph-replayed kernel's fixed time, defaults to the measured per-kernel cost
    assert measured_kernel_overhead_s() == pytest.approx(REDUCE_KERNEL_S)
    assert _kernel(kernel_s=None).launch_s == pytest.approx(REDUCE_KERNEL_S)


def test_time_at_s_by_hand() -> None:
    k = _kernel()
    # SM share 1e12/100 = 1e10 B/s: fixed 10 kB → 1 µs; κ = 2 µs of the 100 µs call is the kernel's own, not
    # work: 32 tiles share the other 97 µs → 3.03125 µs a tile
    assert k.fixed_s == pytest.approx(1 * US)
    assert k.tile_s == pytest.approx(97 / 32 * US)
    # S = 4: κ + 1 + 8·3.03125 = 27.25 µs; combine: κ + 4 partials of 5 kB at 1e10 B/s = 2 µs → 4 µs
    assert k.tiles(4) == 8
    assert k.reduce_s(4) == pytest.approx(4 * US)
    assert k.time_s(4) == pytest.approx(31.25 * US)
    assert k.time_s(1) == pytest.approx(100 * US)  # the measured call


def test_the_straggler_bounds_the_gain() -> None:
    k = _kernel()
    # 1024 tokens in 32-token tiles: past S = 32 a split is empty, so 32 is the last S tried
    assert k.candidates() == [1, 2, 4, 8, 16, 32]
    assert k.tiles(32) == 1 and k.tiles(64) == 1
    # whatever S, the split kernel pays κ, a CTA still streams its fixed bytes and walks a tile, and the combine
    # pays κ: the gain stays below 100 / (2 + 1 + 3.03 + 2)
    assert k.best().gain < 100 / (2 + 1 + 97 / 32 + 2)


def test_segments_split_on_their_own() -> None:
    # DeepSeek-V4's SWA (128) and top-k (1024) lists are walked separately in 16-token tiles:
    # S = 1: 8 + 64; S = 16: ⌈8/16⌉ + ⌈64/16⌉ = 1 + 4; S = 32: 1 + 2; S = 128: 1 + 1 (one joint list: 72, 5, 3, 1)
    k = _kernel(segments=(128, 1024), block=16)
    assert (k.tiles(1), k.tiles(16), k.tiles(32), k.tiles(128)) == (72, 5, 3, 2)


def test_a_loss_where_the_grid_already_fills_the_sms() -> None:
    # 340 CTAs on 170 SMs (2 waves), 128 tokens each: SM share 1.7e12/170 = 1e10 B/s, fixed 20 kB = 2 µs,
    # t₁ = 20 µs, κ 2 → 9 µs a wave → (9 − 2)/4 = 1.75 µs a tile. S = 2: κ + 4 waves × (2 + 2·1.75) = 24 µs,
    # combine κ + 2 waves × 2 partials × 10 kB / 1e10 = 6 µs → 30 µs: 0.67×
    k = _kernel(ctas=340, sms=170, call_s=20 * US, segments=(128,), fixed_bytes=20_000.0, partial_bytes=10_000.0,
                bw_bytes_per_s=1.7e12)
    assert k.time_s(2) == pytest.approx(30 * US)
    best = k.best()
    assert best.splits == 1 and best.gain == 1.0
    assert best.gain_at(2) == pytest.approx(20 / 30) and best.gain_at(2) < 1
    # the same kernel on 4 CTAs: the grid collapses and split-K pays
    assert _kernel(ctas=4, sms=170, call_s=20 * US, segments=(128,), fixed_bytes=20_000.0,
                   partial_bytes=10_000.0, bw_bytes_per_s=1.7e12).best().gain > 1


def test_the_bandwidth_floor_holds_every_split() -> None:
    # 100 CTAs reading 1 MB each on a 1e11 B/s device: 1 ms whatever S
    k = _kernel(ctas=100, call_s=2000 * US, token_bytes=1000.0, fixed_bytes=0.0, partial_bytes=0.0,
                bw_bytes_per_s=1e11)
    assert k.floor_s() == pytest.approx(100 * 1024 * 1000 / 1e11)
    assert all(k.time_s(s) >= k.floor_s() for s in k.candidates())


def test_bad_input_is_one_error() -> None:
    with pytest.raises(ServescopeError, match="split-K"):
        _kernel(ctas=0)
    with pytest.raises(ServescopeError, match="split-K"):
        _kernel(call_s=0.0)
    with pytest.raises(ServescopeError, match="splits must be"):
        _kernel().time_s(0)


def test_sparse_decode_kernels_by_name() -> None:
    assert match("_fused_gather_dequant_attn_kernel") is not None
    assert match("_sparse_attn_decode_ragged_kernel") is not None
    assert match("flash_mla_sparse_decode_fwd") is not None
    assert match("_fused_gather_dequant_attn_splitk_kernel") is None  # already the split path
    assert match("_sparse_attn_decode_reduce_kernel") is None
    assert match("ampere_bf16_gemm_128x64") is None
    # the query and state of the 8 real heads: 8·576·2 (bf16 q) + 8·(512·4 + 8) (fp32 acc, m, l)
    shape = match("_fused_gather_dequant_attn_kernel")
    assert shape is not None
    k = split_model(shape, 1, 170, 213 * US, 8, 1.792e12)
    assert k.fixed_bytes == 8 * 576 * 2 + 8 * (512 * 4 + 8)
    assert k.partial_bytes == 8 * (512 * 4 + 8)
    assert k.tiles(1) == 2048 // 32


def test_pr44899_predicted_per_call() -> None:
    """vLLM #44899 on MI355X: the sign at every batch; the per-call ratio reported against the PR's (module
    docstring), within ±25% at batch 4 and 128 (the issue's target), never fitted to them."""
    shape = match("_sparse_attn_decode_ragged_kernel")
    assert shape is not None
    with (DATA / "split_k_pr44899.csv").open() as f:
        rows = list(csv.DictReader(f))
    errors = {}
    for r in rows:
        batch, before, after = int(r["batch"]), float(r["before_us"]), float(r["after_us"])
        best = split_model(shape, batch, MI355X_SMS, before * US, 16, MI355X_BW).best()
        errors[batch] = best.gain / (before / after) - 1
        if batch <= 320:
            assert best.gain > 1, batch  # split-K pays wherever the PR measured it paying by ≥ 1.8×
    assert abs(errors[4]) <= 0.25 and abs(errors[128]) <= 0.25, errors


def test_a_dispersed_grid_gets_no_split_in_the_plan() -> None:
    sc = _ledger_glm52()
    # 340 decode tokens: 340 CTAs on 170 SMs, and a short call: the kernel's work is already spread
    ev = _evidence("_fused_gather_dequant_attn_kernel", 15.0)
    t = plan(sc, "tpot", 340, forbid=[k for k in TRACK_KINDS if k != "split_k_attention"], kernels=ev).track(
        "split_k_attention")
    assert t.details["split_k_ctas"] == 340
    assert t.details["split_k_off_better"] and t.details["split_k_ratio"] > 1
    assert t.why_not and "does not pay" in t.why_not


def test_the_collapsed_grid_in_the_plan_and_the_ledger() -> None:
    sc = _ledger_glm52()
    t = plan(sc, "tpot", 1, forbid=[k for k in TRACK_KINDS if k != "split_k_attention"],
             kernels=_evidence("_fused_gather_dequant_attn_kernel", 213.0)).track("split_k_attention")
    # 64 heads / TP8 = 8 heads: one head tile of 16 → one CTA for the single decode token
    assert t.details["split_k_ctas"] == 1 and t.details["split_k"] > 1
    assert t.details["split_k_ratio"] < 1 and not t.details["split_k_off_better"]
    assert "1 CTAs on 170 SMs" in t.note
    checks = {c.pair.id: c for c in check_pairs(DATA / "pairs_ledger.csv") if c.pair.track == "split_k_attention"}
    kernel = checks["v54929_glm52_kernel"].prediction
    assert kernel.gain is not None and kernel.gain > 1  # the sign; the size is reported, not asserted


def _ledger_glm52() -> Scenario:
    """The deployment of the ledger's #54929 rows (GLM-5.2 on RTX 5090, TP8 × PP3), as validate builds it."""
    ledger = DATA / "pairs_ledger.csv"
    x = next(p for p in read_ledger(ledger, TRACK_KINDS) if p.id == "v54929_glm52_kernel")
    return deployment(x, ledger)


def _evidence(name: str, us: float) -> KernelEvidence:
    row = KernelRow("decode", name, "attention", None, None, 1, us, None, 1)
    return KernelEvidence(None, None, (row,), (KindTime("decode", 1, us, {"attention": us}),))
