"""Prefix caching in the simulation (issue 29.4; simulate/prefix.py). Expected values are worked from the definition:
a hit rate h skips h of each prompt's prefill in whole blocks (so the mean prefill falls by h · mean prompt, within
one block's share of the prompt), at most ⌊(prompt − 1) / block⌋ blocks; a shared prefix of LEN tokens is
computed once and its ⌊LEN / block⌋ blocks are held once in the KV cache."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.cli import main
from servescope.errors import ScenarioError
from servescope.perfmodel import Scenario
from servescope.simulate import build_workload, engine_for, simulate
from servescope.simulate.loop import simulate_raw
from servescope.simulate.prefix import PrefixCache, parse_workload
from servescope.simulate.workload import Arrival

BASE = Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1, isl=2048, osl=32)
BACKENDS = st.sampled_from(["vllm", "sglang"])


@settings(max_examples=15, deadline=None)
@given(backend=BACKENDS, h=st.floats(0.0, 1.0), isl=st.integers(1024, 4096), conc=st.integers(1, 48),
       n=st.integers(40, 160), arrival=st.sampled_from(["closed", "poisson:30"]))
def test_hit_rate_lowers_prefill_by_h_and_never_raises_ttft(backend, h, isl, conc, n, arrival) -> None:
    sc = BASE.with_(backend=backend, isl=isl)
    off = simulate(sc, arrival, conc, n)
    on = simulate(sc, arrival, conc, n, prefix_hit_rate=h)
    assert on.queueing.preemptions == 0  # ample KV: no recompute to count
    # h = 0 is prefix caching off: every prompt token is prefilled, nothing is cached
    saved = 1.0 - on.prefix.get("mean_prefill_tokens", isl) / isl
    assert saved == pytest.approx(h, abs=0.02)
    assert on.prefix.get("cached_frac", 0.0) == pytest.approx(h, abs=0.02)
    # the mean, not each percentile: shorter prefills shift later requests' phase against the step clock, and a
    # percentile can rise by part of a step (closed loop, h=0.25, isl 1639, c6: p50 +10 %, the mean −5 %); with
    # Poisson sends the mean can too, by less than one step (h=0.125, isl 2952, c38: +1.8 ms against a 53-61 ms
    # TPOT), so the mean may rise by at most one decode step (the longer mean TPOT of the two runs)
    assert on.ttft.mean_s <= off.ttft.mean_s + max(on.tpot.mean_s, off.tpot.mean_s)
    if conc == 1:  # one request at a time: each request's own prefill is all that changes
        assert on.ttft.p99_s <= off.ttft.p99_s * (1 + 1e-9)


def test_hits_are_whole_blocks_and_leave_the_last_token() -> None:
    isl = np.array([1024, 1024, 17, 16, 1])
    pc = PrefixCache(isl, 16, hit_rate=1.0)
    # (prompt − 1) // 16 blocks: 63, 63, 1, 0, 0
    assert pc.hit_blocks.tolist() == [63, 63, 1, 0, 0]
    half = PrefixCache(np.full(1000, 1600), 16, hit_rate=0.5)
    assert half.hit_blocks.mean() * 16 == pytest.approx(800, abs=1.0)  # 50 blocks each, exactly


def test_shared_prefix_computed_once_and_counted_once() -> None:
    sc = BASE.with_(isl=2048)
    n, conc, share = 200, 16, 1024
    plain = simulate(sc, "closed", conc, n)
    shared = simulate(sc, "closed", conc, n, shared_prefix_tokens=share)
    # all but the requests admitted before the prefix was first computed hit 1024 tokens (64 blocks)
    cached = shared.prefix["mean_cached_tokens"] * n
    assert cached % share == 0 and n - conc <= cached / share <= n - 1
    # the KV peak over every step: conc requests of 2048 + 32 tokens hold 16 · 130 blocks; sharing 64 of them: the
    # pool's 64 once + 16 · 66 own blocks
    eng = engine_for(sc)
    peaks = []
    for shared_tokens in (0, share):
        wl = replace(build_workload(Arrival("closed"), n, conc, np.full(n, 2048), np.full(n, 32)),
                     shared_prefix_tokens=shared_tokens)
        peaks.append(int(simulate_raw(sc, eng, wl).step_kv_blocks.max()))
    # the first step admits budget / 2048 prompts before any has computed the prefix: one becomes the holder, the
    # others keep their own copy (64 blocks each) until they finish
    first = eng.max_num_batched_tokens // 2048
    assert peaks == [conc * 130, 64 + conc * 66 + (first - 1) * 64]
    assert shared.ttft.mean_s < plain.ttft.mean_s


def test_bad_prefix_input_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"in \[0, 1\]"):
        simulate(BASE, "closed", 4, 8, prefix_hit_rate=1.5)
    with pytest.raises(ScenarioError, match="shared-prefix:LEN"):
        parse_workload("shared-prefix:abc")
    assert parse_workload("shared-prefix:512") == 512 and parse_workload(None) == 0
    r = CliRunner().invoke(main, ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "4",
                                  "--num-prompts", "8", "--prefix-hit-rate", "-0.1"])
    assert r.exit_code != 0 and "Traceback" not in r.output and "[0, 1]" in r.output


def test_cli_prefix_options_in_the_document() -> None:
    import json

    r = CliRunner().invoke(main, ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--isl", "2048",
                                  "--osl", "16", "--concurrency", "8", "--num-prompts", "40",
                                  "--workload", "shared-prefix:1024", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["prefix_cache"]["shared_prefix_tokens"] == 1024
    assert 0 < doc["prefix_cache"]["cached_frac"] <= 0.5


def test_thousand_requests_with_prefix_caching_run() -> None:
    """Issue 29's budget is 1 s on one core (bench/, not asserted here: tests never assert wall time)."""
    res = simulate(BASE.with_(isl=1024, osl=128), "closed", 64, 1000, prefix_hit_rate=0.5,
                   engine=engine_for(BASE))
    assert res.requests == 1000 and res.prefix["cached_frac"] == pytest.approx(0.5, abs=0.01)
