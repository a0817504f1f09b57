"""What a simulation will hold in memory, estimated before anything is allocated, and the one-line refusal above a limit.

What it does: from what is known before a run — requests, mean prompt and output lengths, the longest request, the
client's in-flight cap and the engine's batch and token budget — estimate the peak bytes of a run (loop.py,
metrics.py):
  per request     ~30 float64/int64 arrays indexed by request (workload, client, scheduler, loop, metrics)
  per token gap   the pooled inter-token gaps: the loop's pieces, their concatenation, the finite copy and the
                  percentile's partition copy (metrics.Stats.of)
  per step        the step record (a tuple of six Python numbers in a list, then a row of a float array)
  step tables     stepcost.StepCost's per-step-size tables (one entry per token count a step can reach, ~60
                  float64 intermediates of perfmodel.step.step_arrays each) and its context grid
and raise a ScenarioError naming the run, the estimate and the limit when it is above the limit. The limit is the
caller's (the CLI passes `limit_for` the machine's available memory, `servescope._paths.available_memory_bytes`;
the simulation itself opens no file), DEFAULT_LIMIT_BYTES when none is given.
Time is estimated the same way: engine steps × SECONDS_PER_STEP (`check_time` refuses a run above the caller's
limit: `--max-num-batched-tokens 1 --num-prompts 100000` is ~1.5e8 steps, hours).
What it does not: measure anything at run time (the CLI shows progress on long runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from servescope.errors import ScenarioError

DEFAULT_LIMIT_BYTES = 8 << 30
BYTES_PER_REQUEST = 30 * 8
BYTES_PER_TOKEN_GAP = 26
BYTES_PER_STEP = 330
BYTES_PER_TABLE_TOKEN = 60 * 8
GRID_TOKENS = 16  # stepcost.CTX_GRID_TOKENS: the decode-attention table has one entry per 16 tokens of context
# Wall seconds per estimated step, the upper end measured: 1-42 µs (2-core dev box, Llama-3.1-8B on H100: 2,000
# prompts at c=64 19 µs; token budget 1, 42 µs; decode runs advance many steps at once, ~1 µs). An upper bound on
# purpose: the estimate refuses, and a refusal must not hit a run that would have taken minutes.
SECONDS_PER_STEP = 42e-6


@dataclass(frozen=True)
class RunShape:
    """What is known of a run before it starts."""

    requests: int
    mean_isl: float
    mean_osl: float
    longest: int  # prompt + output of the longest request, tokens
    batch: int  # sequences per step at most: min(in-flight cap, engine max_num_seqs · dp, requests)
    step_tokens: int  # tokens per step at most (the size of the step tables)
    budget: int = 1 << 62  # the engine's token budget per step (max_num_batched_tokens · dp)

    @property
    def steps(self) -> float:
        """Engine steps, roughly: the output tokens at full batches (a decode token counts against the token
        budget) plus the prompt tokens at full budgets."""
        per_step = max(min(self.batch, self.budget), 1)
        out = self.requests * self.mean_osl / per_step
        prompts = self.requests * self.mean_isl / max(min(self.budget, self.step_tokens), 1)
        return out + prompts + self.requests / max(self.batch, 1)

    def seconds(self) -> float:
        """The estimated wall time of the run, s (an upper end: SECONDS_PER_STEP)."""
        return self.steps * SECONDS_PER_STEP

    def bytes(self) -> float:
        """The estimated peak bytes of the run."""
        return (self.requests * BYTES_PER_REQUEST
                + self.requests * max(self.mean_osl - 1.0, 0.0) * BYTES_PER_TOKEN_GAP
                + self.steps * BYTES_PER_STEP
                + (self.step_tokens + 2) * 2 * BYTES_PER_TABLE_TOKEN
                + (self.longest / GRID_TOKENS + 4) * BYTES_PER_TABLE_TOKEN)


def step_tokens(budget: int, max_seqs: int, requests: int, longest: int) -> int:
    """The most tokens one step can carry (the step tables need no entry beyond it): a step's prefill tokens fit
    the token budget and the prompts of at most max_seqs requests, a decode step one token per running sequence.
    `budget` and `max_seqs` are the instance's (× dp)."""
    running = min(max_seqs, requests)
    return max(min(budget, running * longest), running)


def run_shape(requests: int, mean_isl: float, mean_osl: float, longest: int, cap: int | None, max_num_seqs: int,
              max_num_batched_tokens: int, dp: int) -> RunShape:
    """The RunShape of `requests` requests under an in-flight cap (None: none) on an engine of dp ranks."""
    max_seqs, budget = max_num_seqs * max(dp, 1), max_num_batched_tokens * max(dp, 1)
    batch = min(max_seqs, requests, cap if cap is not None else requests)
    return RunShape(requests, float(mean_isl), float(mean_osl), int(longest), max(batch, 1),
                    step_tokens(budget, max_seqs, requests, int(longest)), budget)


def limit_for(available_bytes: int | None) -> int:
    """The memory a run may take on a machine with `available_bytes` available (None: unknown): that, at most
    DEFAULT_LIMIT_BYTES (a run that needs more would also take many minutes)."""
    return DEFAULT_LIMIT_BYTES if available_bytes is None else max(0, min(DEFAULT_LIMIT_BYTES, available_bytes))


def check_memory(shape: RunShape, limit_bytes: int | None = None) -> None:
    """ScenarioError when the run's estimated peak is above `limit_bytes` (DEFAULT_LIMIT_BYTES when None)."""
    limit = DEFAULT_LIMIT_BYTES if limit_bytes is None else int(limit_bytes)
    need = shape.bytes()
    if need <= limit:
        return
    raise ScenarioError(
        f"simulating {shape.requests:,} requests (~{shape.mean_isl:,.0f} + {shape.mean_osl:,.0f} tokens each, "
        f"batches of up to {shape.batch:,}, ~{shape.steps:,.0f} steps) would need ~{_gb(need)} of memory, above "
        f"the limit of {_gb(limit)}{' (the memory available)' if limit < DEFAULT_LIMIT_BYTES else ''}: fewer requests "
        "(--num-prompts, burst:N) or a smaller concurrency")


def check_time(shape: RunShape, limit_s: float | None) -> None:
    """ScenarioError when the run's estimated wall time is above `limit_s` (None: no limit)."""
    if limit_s is None or shape.seconds() <= limit_s:
        return
    raise ScenarioError(
        f"simulating {shape.requests:,} requests (~{shape.mean_isl:,.0f} + {shape.mean_osl:,.0f} tokens each, "
        f"batches of up to {shape.batch:,}, a token budget of {min(shape.budget, shape.step_tokens):,} per step) "
        f"would take ~{_duration(shape.seconds())} (~{shape.steps:,.0f} engine steps), above the limit of "
        f"{_duration(limit_s)}: fewer requests (--num-prompts, burst:N) or a larger --max-num-batched-tokens")


def _duration(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 60:,.0f} min" if seconds >= 90 else f"{seconds:,.0f} s"


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.0f} MB"
