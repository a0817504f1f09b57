"""TTFT and TPOT of each simulated request split at the boundaries where engines measure them (issue 29.1).

    TTFT = front end + queue + prefill + delivery
  front end  sent → schedulable: HTTP, chat template, tokenisation, admission. The model's per-request set-up
             (stepcost.setup_s: efficiency prefill_overhead_s, fitted on TTFT at concurrency 1, plus the fitted
             per-layer MLA / linear-attention prefill set-up) less the delivery: the delivery is split out of that
             fitted cost, not added to it (stepcost.split_setup)
  queue      schedulable → first scheduled (vllm:request_queue_time_seconds)
  prefill    first scheduled → the engine emits the first token: every step the request's prompt chunks ran in,
             whole (the steps they share with other requests' decodes and chunks included), and any re-prefill
             after a preemption (vllm:request_prefill_time_seconds)
  delivery   the engine emits the token → the client holds it: detokenise, build the output, stream it
             (specs/data/serving_boundaries.toml per engine and release, at most the set-up; paid by every token,
             so it shifts the first and the last and leaves the gaps)
    mean ITL of a request = TPOT = GPU + host + rank wait − overlap + stall, each the mean over the steps between
    its first and its last token (Σ over those steps / (output tokens − 1)):
  gpu        the step's GPU work (stepcost.py's step time less the host time and the rank wait)
  host       the host (CPU) time between steps: perfmodel.combine.host_cpu_s, the closed form's own
  rank wait  ranks waiting for the slowest: a trace's measured wait per step when given (EngineConfig.rank_wait_s),
             else the model's (attention-DP: the attention priced at the busiest rank; 0 at dp = 1; stepcost.py)
  overlap    the host time hidden behind the GPU by async scheduling: host − combine.exposed_host_s (0 without)
  stall      what the steps do not hold: KV swap copies (offload.py) and idle gaps (≈ 0)
Exact by construction: prefill and stall are what is left of the request's TTFT and TPOT once the other parts are
taken (the tests compute them independently). Each part carries where it came from: `model`, `trace`, or, in the
comparison with a /metrics scrape (report/simulate_doc.py), `engine metric`.
What it does not: simulate (loop.py) or read a trace (rank_wait_from_skew takes the per-rank collective times the
caller measured: cli `simulate --rank-trace`, analysis.ranks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from servescope.units import us_to_s

if TYPE_CHECKING:
    from servescope.simulate.loop import RawRun

TTFT_PARTS = ("front_end", "queue", "prefill", "delivery")
TPOT_PARTS = ("gpu", "host", "rank_wait", "overlap", "stall")  # tpot = gpu + host + rank_wait − overlap + stall
SIGNS = {"overlap": -1.0}
MODEL, TRACE = "model", "trace"  # where a part came from ("engine metric": the --metrics scrape, report/)


def rank_wait_from_skew(per_rank_us: Iterable[Sequence[float]], steps: int) -> float | None:
    """A trace's rank-arrival wait per step, s, from each collective's kernel time per rank summed over `steps`
    common steps (µs; analysis.ranks CollectiveSkew.per_rank_us): Σ over collectives of (mean over ranks −
    fastest rank) / steps. A collective's kernel on a rank runs from that rank's arrival to the last one's plus
    the transfer, so its time above the shortest (the last to arrive) is that rank's wait; the mean over ranks is
    the wait the step carries beyond the model's (perfmodel prices isolated collectives: specs/collectives.py).
    None without steps or collectives."""
    rows = [list(r) for r in per_rank_us if len(r)]
    if steps < 1 or not rows:
        return None
    return us_to_s(float(sum(sum(r) / len(r) - min(r) for r in rows))) / steps


@dataclass(frozen=True)
class Parts:
    """Per-request seconds of every part (arrays indexed by request; TPOT parts NaN for one-token outputs), with
    where each came from."""

    ttft: dict[str, np.ndarray]
    tpot: dict[str, np.ndarray]
    sources: dict[str, str] = field(default_factory=dict)

    def total(self, which: str) -> np.ndarray:
        """Σ of one side's parts (overlap subtracted): each request's TTFT or TPOT again."""
        parts = self.ttft if which == "ttft" else self.tpot
        return np.asarray(sum(SIGNS.get(k, 1.0) * v for k, v in parts.items()))


def _window_sums(raw: RawRun, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Σ of each step part over the steps ending in (lo, hi] per request (cumulative sums, two searches)."""
    t = raw.step_t_s
    i0, i1 = np.searchsorted(t, lo, "right"), np.searchsorted(t, hi, "right")
    out = {}
    for name, x in (("gpu", raw.step_gpu_s), ("rank_wait", raw.step_wait_s), ("host", raw.step_cpu_s),
                    ("exposed", raw.step_host_s)):
        cum = np.concatenate([[0.0], np.cumsum(np.zeros(len(t)) if x is None else x)])
        out[name] = cum[i1] - cum[i0]
    return out


def split_requests(raw: RawRun, ttft: np.ndarray, tpot: np.ndarray) -> Parts:
    """Each request's TTFT and TPOT (the client's, metrics.per_request) split into the parts of the module
    docstring."""
    n = len(raw.sent_s)
    front, deliver = np.full(n, raw.setup_s), np.full(n, raw.delivery_s)
    queue = np.maximum(raw.first_sched_s - raw.sent_s - raw.setup_s, 0.0)
    t_parts = {"front_end": front, "queue": queue, "prefill": ttft - front - queue - deliver, "delivery": deliver}
    steps = np.maximum(raw.osl - 1, 1).astype(float)
    ok = raw.osl > 1
    s = _window_sums(raw, raw.first_token_s, raw.finish_s)
    p = {k: np.where(ok, s[k] / steps, np.nan) for k in ("gpu", "host", "rank_wait")}
    p["overlap"] = np.where(ok, (s["host"] - s["exposed"]) / steps, np.nan)
    p["stall"] = tpot - p["gpu"] - p["host"] - p["rank_wait"] + p["overlap"]
    src = dict(raw.sources or {})
    src.update(queue=f"{MODEL}: simulated scheduler (first scheduled − schedulable)",
               prefill=f"{MODEL}: simulated steps from admission to the first token (whole steps, shared ones "
                       "included)",
               gpu=f"{MODEL}: step model (perfmodel.step via stepcost.py)",
               host=f"{MODEL}: perfmodel.combine.host_cpu_s (efficiency cpu_overhead_s + per sequence)",
               overlap=f"{MODEL}: host − perfmodel.combine.exposed_host_s (engine overlap, overlap_exposed_frac)",
               stall=f"{MODEL}: KV swap copies and idle gaps between the request's tokens")
    src.setdefault("rank_wait", f"{MODEL}: attention-DP busiest-rank wait (0 at dp = 1)")
    return Parts(t_parts, {k: p[k] for k in TPOT_PARTS}, src)
