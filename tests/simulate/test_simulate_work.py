"""The simulation's bounded work (issue 30.5): what is priced once is priced once, and a faster path gives the same run.

Counts calls and priced steps with wrappers, never seconds. The reference runs switch the caches off (the chunk
table looked up on every chunk, a decode run priced whole before it is cut at the next client event, as before
issue 30.5) and must give identical arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from servescope.perfmodel import Scenario
from servescope.simulate import engine_for, replay_workload
from servescope.simulate import loop as loop_mod
from servescope.simulate.loop import RawRun, simulate_raw
from servescope.simulate.stepcost import StepCost


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return Scenario.build(model="llama-3.1-8b", gpu="h100_sxm", tp=1)


def _workload(n: int = 120, fixed: bool = False) -> Any:
    rng = np.random.default_rng(11)
    send = np.cumsum(rng.exponential(0.05, n))
    isl = np.full(n, 700) if fixed else rng.integers(30, 2500, n)
    osl = rng.integers(5, 200, n)
    return replay_workload(send, isl, osl, 24)


def _same(a: RawRun, b: RawRun) -> None:
    for name in RawRun.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y, equal_nan=True), name
        else:
            assert x == y, name


@pytest.fixture()
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Counts the per-chunk table lookups and the distinct (tokens, context) chunks asked for, and the decode steps
    priced by decode_run_s."""
    seen: dict[str, Any] = {"lookups": 0, "keys": set(), "priced_steps": 0, "runs": 0}
    one, total, run = StepCost._chunk_one, StepCost.chunk_attention_s, StepCost.decode_run_s

    def chunk_one(self: StepCost, k: int, c: int) -> float:
        seen["lookups"] += 1
        return one(self, k, c)

    def chunk_attention_s(self: StepCost, n: np.ndarray, ctx: np.ndarray) -> float:
        seen["keys"].update(zip(n.tolist(), ctx.tolist(), strict=True))
        return total(self, n, ctx)

    def decode_run_s(self: StepCost, ctx: np.ndarray, k: int) -> np.ndarray:
        seen["priced_steps"] += k
        seen["runs"] += 1
        return run(self, ctx, k)

    monkeypatch.setattr(StepCost, "_chunk_one", chunk_one)
    monkeypatch.setattr(StepCost, "chunk_attention_s", chunk_attention_s)
    monkeypatch.setattr(StepCost, "decode_run_s", decode_run_s)
    yield seen


def test_each_prefill_chunk_is_priced_once(sc: Scenario, counted: dict[str, Any]) -> None:
    # every prompt 700 tokens: the chunks repeat, (700, 0) above all
    simulate_raw(sc, engine_for(sc), _workload(fixed=True))
    assert counted["keys"], "the run carried no prefill chunk"
    assert counted["lookups"] == len(counted["keys"])


def test_chunk_cache_gives_the_uncached_run(sc: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _workload()
    cached = simulate_raw(sc, engine_for(sc), wl)

    def uncached(self: StepCost, n: np.ndarray, ctx: np.ndarray) -> float:
        total = 0.0
        for k, c in zip(n.tolist(), ctx.tolist(), strict=True):
            total += self._chunk_one(k, c)
        return total

    monkeypatch.setattr(StepCost, "chunk_attention_s", uncached)
    _same(cached, simulate_raw(sc, engine_for(sc), wl))


def test_decode_runs_price_about_the_steps_they_take(sc: Scenario, counted: dict[str, Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    wl = _workload(200)
    fast = simulate_raw(sc, engine_for(sc), wl)
    priced_fast, runs = counted["priced_steps"], counted["runs"]
    counted["priced_steps"] = 0
    monkeypatch.setattr(loop_mod._Loop, "_run_until_event", _whole_run)  # price each run whole (before)
    whole = simulate_raw(sc, engine_for(sc), wl)
    _same(fast, whole)
    assert priced_fast < counted["priced_steps"]  # arrivals cut runs short: fewer steps priced
    # at most 4 steps priced per step taken, beyond a first prefix of RUN_PREFIX_STEPS + 2 per run
    assert priced_fast <= 4 * len(fast.step_t_s) + runs * (loop_mod.RUN_PREFIX_STEPS + 2)


def _whole_run(self: Any, ctx: np.ndarray, k: int, swap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The decode run as priced before issue 30.5: all k steps, then cut at the next client event."""
    durs = self.cost.decode_run_s(ctx, k)
    durs[0] += swap_s
    ends = self.now + np.cumsum(durs)
    starts = np.concatenate([[self.now], ends[:-1]])
    used = max(1, int(np.count_nonzero(starts < self.cl.next_event_s())))
    return durs[:used], ends[:used]
