"""Split-K with uneven per-CTA work (perfmodel.split_k): the straggler CTA or the load per SM slot sets the call,
whichever binds — a split pays when it cuts the straggler and loses when the long CTAs are already spread and the
split only adds fixed streaming, partial tiles and a combine. Round numbers (SM share 1e10 B/s, κ = 2 µs)."""

from __future__ import annotations

import pytest

from servescope.errors import ServescopeError
from servescope.perfmodel.split_k import SplitKernel, sparse_decode_model
from servescope.specs.decode_kernels import shape_for

US = 1e-6


def _grid(work: tuple[tuple[int, ...], ...], call_us: float) -> SplitKernel:
    # 170 SMs at 1.7e12 B/s: 1e10 B/s an SM; 20 kB fixed → 2 µs a CTA; 10 kB partials; κ = 2 µs
    return SplitKernel(len(work), 170, call_us * US, max(work, key=sum), 32, 100.0, 20_000.0, 10_000.0, 1.7e12,
                       kernel_s=2 * US, cta_segments=work)


def test_a_loss_where_uneven_work_is_already_spread() -> None:
    # 340 CTAs on 170 SMs: 170 walk 16 tokens (1 tile), 170 walk 96 (3 tiles); t₁ = 20 µs, κ 2 → 18 µs.
    # Straggler bound: (18 − 2)/3 = 5.33 µs a tile; load bound: (18·170 − 340·2)/(170·1 + 170·3) = 3.5 µs — the
    # load binds first (the straggler, 2 + 3·3.5 = 12.5 µs, hides under it): t_tile = 3.5 µs.
    k = _grid(((16,),) * 170 + ((96,),) * 170, 20.0)
    assert k.uneven and k.tile_s == pytest.approx(3.5 * US)
    # S = 2: the 16-token CTAs become two 8-token splits of a whole tile each, the 96-token ones two of 2 tiles:
    # load (170·(2·2 + 2·3.5) + 170·(2·2 + 4·3.5)) / 170 = 29 µs; combine κ + 2 waves × 2 × 10 kB / 1e10 = 6 µs
    assert k.span_s(2) == pytest.approx(29 * US)
    assert k.time_s(2) == pytest.approx((2 + 29 + 6) * US)
    best = k.best()
    assert best.splits == 1  # no split pays: the straggler was not what bound the call
    assert all(best.gain_at(s) < 1 for s in best.tried if s > 1)


def test_the_straggler_not_the_mean_decides() -> None:
    # 340 CTAs on 170 SMs: one walks the whole top-k (2048 tokens, 64 tiles), 339 walk one tile; t₁ = 200 µs.
    # The straggler binds: (200 − 2 − 2)/64 = 3.0625 µs a tile; S = 2 halves it: κ + (2 + 32·3.0625) + combine 6
    work = ((2048,),) + ((32,),) * 339
    k = _grid(work, 200.0)
    assert k.tile_s == pytest.approx(196 / 64 * US)
    assert k.time_s(2) == pytest.approx((2 + 2 + 32 * 196 / 64 + 6) * US)
    assert k.best().gain > 1.8
    # the same grid priced on its mean work (38 tokens a CTA, 2 tiles, two waves) sees a full grid and no gain
    mean = round(sum(n for (n,) in work) / len(work))
    uniform = SplitKernel(340, 170, 200 * US, (mean,), 32, 100.0, 20_000.0, 10_000.0, 1.7e12, kernel_s=2 * US)
    assert uniform.best().splits == 1
    # past the point where the short CTAs' splits outweigh the straggler, more splits lose again
    assert k.best().gain_at(32) < 1


def test_ragged_valid_lengths_of_a_sparse_decode_kernel() -> None:
    # vLLM #54929's kernel clamps its loop to each token's valid top-k length: 4 tokens, valid 2048, 128, 64, 3000
    shape = shape_for("_fused_gather_dequant_attn_kernel")
    assert shape is not None
    k = sparse_decode_model(shape, 4, 170, 100 * US, 8, 1.792e12, lengths=(2048, 128, 64, 3000))
    assert k.cta_segments == ((2048,), (128,), (64,), (2048,))
    assert k.uneven and k.tiles(1) == 64 and k.tiles(16) == 4
    # uniform lengths are not uneven work: the waves model applies
    even = sparse_decode_model(shape, 2, 170, 100 * US, 8, 1.792e12, lengths=(2048, 2048))
    assert not even.uneven and even.tile_s == sparse_decode_model(shape, 2, 170, 100 * US, 8, 1.792e12).tile_s


def test_uneven_work_needs_one_entry_per_cta() -> None:
    with pytest.raises(ServescopeError, match="cta_segments"):
        SplitKernel(4, 170, 20 * US, (16,), 32, 100.0, 0.0, 0.0, 1e12, cta_segments=((16,),) * 3)
    with pytest.raises(ServescopeError, match="cta_segments"):
        SplitKernel(1, 170, 20 * US, (16,), 32, 100.0, 0.0, 0.0, 1e12, cta_segments=((),))


def test_pr54929_flat_across_tokens_and_valid_lengths() -> None:
    # vllm-project/vllm#54929: "213 → 28.7 µs/call at S=16–32, flat across T=1/4 and valid_len 128/2048". Its split
    # path cuts the whole top-k range (2048) into S chunks and clamps each to the token's valid length: at S = 16 a
    # chunk is 128 candidates and at S = 32 64, so a 128-long list's first split walks as many tiles as a full one's,
    # and 4 tokens' 4·S CTAs still fit in one wave of 170 SMs — the model's time is the same in all four cases
    shape = shape_for("_fused_gather_dequant_attn_kernel")
    assert shape is not None and shape.clamped_splits
    times = {(t, n): sparse_decode_model(shape, t, 170, 213 * US, 8, 1.792e12, lengths=(n,) * t)
             for t in (1, 4) for n in (128, 2048)}
    for s in (16, 32):
        got = {key: k.time_s(s) for key, k in times.items()}
        assert max(got.values()) == pytest.approx(min(got.values()), rel=1e-3), (s, got)
    # the 128-long list at S = 32: two splits of 64 candidates (2 tiles each), thirty empty ones (each still
    # streams its query and partial); the full list: 2 tiles in every split
    short, full = times[(1, 128)], times[(1, 2048)]
    assert short.split_tiles((128,), 32) == [2, 2] + [0] * 30
    assert full.split_tiles((2048,), 32) == [2] * 32
    assert short.tiles(1) == full.tiles(1) == 64  # the serial kernel walked all 64 tiles either way
