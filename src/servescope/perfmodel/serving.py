"""Aggregated (continuous-batching) serving at a fixed concurrency: TPOT, TTFT, output tokens/s, memory.

Model (docs/model.md §Serving), for concurrency c (capped at the memory limit c_max), isl/osl per request:
  decode step at batch c_eff = min(c, c_max) and mean context isl + osl/2 (step.py); c_max is the number of
  sequences whose KV at the mean context isl + osl/2 fits (engines allocate KV blocks as sequences grow, so in
  steady state the cache holds mean-length sequences), at most the engine's max_num_seqs · dp (the engine record
  for the GPU's memory, specs.engines, as the simulation schedules); the reported max_concurrency is the stricter
  KV count at the full isl + osl
  t_pf   = prefill of one request's isl tokens on each attention-DP rank (dp requests in parallel, one prefill
           step) / prefill_eff + prefill_overhead_s + n_mla · mla_prefill_layer_s + n_lin · linear_prefill_layer_s
           (per-layer set-up of the non-GEMM attention paths of a prefill, which the FLOP/byte roofline of the
           chunk does not see: n_mla MLA layers — latent-cache context path: kv up-projection of the cached
           latents, rope/concat and FP8 KV quantisation kernels, chunked-context metadata; n_lin linear-attention
           (gated delta-net) or Mamba layers — a chain of small chunked-scan kernels (cumsum, triangular solve,
           state passing, output) launched eagerly per layer; both 0 for plain GQA models)
  t_pf'  = the same prefill without its launch/CPU overhead: its marginal cost when it rides in a mixed step
  decode-only (Deployment.decode_only): the decode step at context isl, with no prompts in the steps (I = 0)
  TPOT   = decode step + prefill_interference · I · (the prefill's marginal terms: FLOPs, KV traffic, collective
           bandwidth — not the weights nor the collectives' latency, which the decode step already pays; `_marginal`)
           I = (c_eff − 1)/(osl · dp) · t_pf' on engines that mix prompts into decode steps (vLLM, TRT-LLM: every
           request is prefilled once per lifetime, spread over the osl decode steps of the others);
           I = u · (n − 1 − W(n, k))/(osl − 1) on lock-step engines (SGLang, below): decoding pauses while the rest
           of a request's wave is prefilled after its first token, once per lifetime
  TTFT   = t_pf + decode step (a new request waits for the running step) + s · (u · (W(n, k) + 1) − t_pf')
           + waiting for a free slot when c > c_max: (c − c_max)/c_max request lifetimes
           W(n, k) = the mean wait, in prefills, of a synchronised wave of n = c_eff/dp requests per rank arriving
           together and prefilled k = max(1, ⌊B/isl⌋) per step (B = the engine's prompt tokens per step,
           max_num_batched_tokens of the engine record for the GPU's memory, specs.engines — the simulation's
           token budget too): request j's first token comes at the end of its step, so
           W = mean_j min((⌊j/k⌋ + 1)·k, n) − 1 = (k²·m(m+1)/2 + r·n)/n − 1, m = ⌊n/k⌋, r = n − m·k
           ((n − 1)/2 for k = 1, n − 1 when the wave fits one step);
           u = one request's share of a wave's prefill step: the prefill step of min(k, ⌈n⌉) requests per rank
           (its launch/CPU overhead included: each wave step is a step) / prefill_eff / min(k, ⌈n⌉);
           s = 1 for engines whose steps are all-prefill or all-decode (SGLang): with equal lengths the c requests
           of a closed-loop benchmark finish on the same step, so every wave arrives synchronised;
           s = ttft_queue_frac for engines that mix prompts into decode steps (vLLM, TRT-LLM): completions stay
           staggered after the first wave, and the fitted share is about 1/(waves in the run) plus the queueing of
           the staggered arrivals
  output tokens/s = c_eff · osl / (TTFT + (osl − 1) · TPOT)   (one instance: all tp·dp·pp GPUs)
The point's terms are the decode step's terms plus the interference share of the prefill's marginal terms, so they
add up to TPOT exactly. What it does not: disaggregated prefill/decode, prefix caching, speculative decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from servescope.perfmodel import memory
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.ranges import bounds, provenance, scenario_case
from servescope.perfmodel.step import (
    TERMS,
    CollectiveCost,
    StepParts,
    combine_step,
    public_name,
    stack_parts,
    step_parts,
)
from servescope.units import s_to_ms

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario


@dataclass(frozen=True)
class ServingPoint:
    concurrency: int
    tpot_s: float
    ttft_s: float
    output_tok_s: float
    memory_bytes_per_gpu: float
    max_concurrency: int
    dominant: str
    terms_s: dict[str, float]  # add up to tpot_s
    collectives: dict[str, CollectiveCost]  # per decode step
    step_time_s: float  # the decode step alone (no prefill interference)
    floor_s: float  # physical floor of the decode step
    batch: int  # sequences actually in the decode step (min(concurrency, max_concurrency))
    # 80 % ranges from the cross-validated error of the scenario's case, and where the inputs came from (ranges.py)
    tpot_low_s: float = float("nan")
    tpot_high_s: float = float("nan")
    ttft_low_s: float = float("nan")
    ttft_high_s: float = float("nan")
    provenance: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (f"ServingPoint(concurrency {self.concurrency}: TPOT {s_to_ms(self.tpot_s):.3f} ms, TTFT "
                f"{s_to_ms(self.ttft_s):.1f} ms, {self.output_tok_s:,.0f} tok/s, {self.dominant}-bound)")


def mla_layers(sc: Scenario) -> int:
    """Attention layers of the scenario's model that use multi-head latent attention (MLA, DeepSeek-V4)."""
    m = sc.model
    return sum(1 for a in m.layer_attention if a != "none") if m.attention_kind in ("mla", "v4") else 0


def linear_layers(sc: Scenario) -> int:
    """Layers of the scenario's model whose mixer is linear attention or Mamba (chunked scans in prefill)."""
    return sum(1 for a in sc.model.layer_attention if a in ("linear", "mamba"))


def wave_wait(n: Any, k: Any) -> Any:
    """Mean extra first-token wait (in prefills of one request) of a synchronised wave of n requests prefilled k per
    step: (k²·m(m+1)/2 + r·n)/n − 1 with m = ⌊n/k⌋, r = n − m·k (module docstring); numpy-broadcasting."""
    n = np.maximum(n, 1.0)
    m = np.floor(n / k)
    r = n - m * k
    return (k * k * m * (m + 1.0) / 2.0 + r * n) / n - 1.0


@dataclass(frozen=True)
class TtftTimes:
    """The step times TTFT reads (s, numpy-broadcasting; before prefill_eff): one request's prefill on each
    attention-DP rank (`pf_step`) and its launch/CPU overhead (`pf_overhead`), one prefill step of a synchronised
    wave (`wave_step`: in_step requests per rank, its overhead included), the decode step, and TPOT."""

    pf_step: Any
    pf_overhead: Any
    wave_step: Any
    dec_step: Any
    tpot: Any


@dataclass(frozen=True)
class TtftQueue:
    """What a new request queues behind (numpy-broadcasting): c requests, `cap` of them running, osl, dp ranks; a
    wave prefilled `per_step` = k per step, `in_step` = min(k, ⌈c_eff/dp⌉) in the wave's step, `lockstep` 1.0 where
    waves stay synchronised; `n_mla` / `n_lin` layers whose prefill pays a per-layer set-up."""

    c: Any
    cap: Any
    osl: Any
    dp: Any
    per_step: Any
    in_step: Any
    lockstep: Any
    n_mla: Any = 0
    n_lin: Any = 0

    @classmethod
    def of(cls, p: ServingParts) -> TtftQueue:
        return cls(p.concurrency, p.cap, p.osl, p.dp, p.per_step, p.in_step, p.lockstep, p.n_mla, p.n_lin)


@dataclass(frozen=True)
class TtftEfficiency:
    """The efficiency fields TTFT reads (Efficiency's, scalars or per-candidate arrays)."""

    prefill_eff: Any = 1.0
    prefill_overhead_s: Any = 0.0
    queue_frac: Any = 0.0  # Efficiency.ttft_queue_frac
    mla_prefill_layer_s: Any = 0.0
    linear_prefill_layer_s: Any = 0.0

    @classmethod
    def of(cls, eff: Efficiency) -> TtftEfficiency:
        return cls(eff.prefill_eff, eff.prefill_overhead_s, eff.ttft_queue_frac, eff.mla_prefill_layer_s,
                   eff.linear_prefill_layer_s)


def ttft_s(t: TtftTimes, q: TtftQueue, e: TtftEfficiency) -> Any:
    """TTFT (s) from its parts (formula in the module docstring); numpy-broadcasting in every field so the
    efficiency fit can evaluate many candidate constants at once."""
    ce = np.minimum(q.c, q.cap)
    t_pf = (t.pf_step / e.prefill_eff + e.prefill_overhead_s + q.n_mla * e.mla_prefill_layer_s
            + q.n_lin * e.linear_prefill_layer_s)
    t_marg = (t.pf_step - t.pf_overhead) / e.prefill_eff
    u = t.wave_step / e.prefill_eff / q.in_step  # one request's share of a wave's prefill step (its overhead included)
    share = q.lockstep + (1.0 - q.lockstep) * e.queue_frac
    ttft = t_pf + t.dec_step + share * (u * (wave_wait(ce / q.dp, q.per_step) + 1.0) - t_marg)
    over = np.maximum(q.c - q.cap, 0.0) / q.cap
    return ttft + over * (ttft + (q.osl - 1) * t.tpot)


@dataclass(frozen=True)
class ServingParts:
    """Efficiency-free parts of aggregated serving at some concurrencies (1-d arrays over the points, or stacked
    over many scenarios for fitting): the decode step at the concurrency, one prefill, and the TTFT inputs."""

    dec: StepParts
    pf: StepParts
    wave: StepParts  # one prefill step of a synchronised wave: in_step requests per attention-DP rank
    concurrency: np.ndarray
    cap: np.ndarray  # sequences whose KV at the mean context fits
    osl: np.ndarray
    dp: np.ndarray
    n_mla: np.ndarray
    n_lin: np.ndarray
    per_step: np.ndarray  # requests prefilled per step in a wave: k = max(1, ⌊B/isl⌋)
    in_step: np.ndarray  # requests in the wave's prefill step: min(k, ⌈c_eff/dp⌉)
    lockstep: np.ndarray  # 1.0 for engines whose waves stay synchronised, else 0.0
    mixed: np.ndarray  # 1.0 where prompts share the decode steps (0.0: a decode-only measurement)


def serving_parts(sc: Scenario, concurrency: Sequence[int] | np.ndarray, flat: bool = False) -> ServingParts:
    """The efficiency-free parts of `predict_arrays` for one scenario; `flat` broadcasts every array to one value
    per point (for `stack_serving`), else per-scenario constants stay scalars (faster)."""
    c = np.maximum(np.asarray(concurrency, dtype=float).ravel(), 1.0)
    n = len(c)
    eng = sc.engine.scheduler  # the engine record the simulation schedules with (specs.engines)
    # steady state: mean context in flight, at most max_num_seqs running per attention-DP rank
    cap = max(min(memory.max_concurrency(sc, sc.isl + sc.osl / 2.0), eng.max_num_seqs * sc.dp), 1)
    ctx = sc.decode_context  # decode-only: the context stays fixed
    dec = step_parts(sc, np.minimum(c, cap), ctx, 1)
    pf = step_parts(sc, sc.dp, 0, sc.isl, prefill=True)  # one request per attention-DP rank, in parallel
    per_step = max(1, eng.max_num_batched_tokens // max(sc.isl, 1))
    in_step = np.minimum(float(per_step), np.ceil(np.minimum(c, cap) / sc.dp))
    wave = step_parts(sc, sc.dp * in_step, 0, sc.isl, prefill=True)
    if flat:
        dec, pf, wave = dec.take(n), pf.take(n), wave.take(n)

    def full(x: float) -> np.ndarray:
        return np.full(n, float(x)) if flat else np.asarray(float(x))

    return ServingParts(dec, pf, wave, c, full(cap), full(sc.osl), full(sc.dp), full(mla_layers(sc)),
                        full(linear_layers(sc)), full(per_step), in_step, full(float(eng.lockstep_waves)),
                        full(0.0 if sc.decode_only else 1.0))


def stack_serving(parts: list[ServingParts]) -> ServingParts:
    """Concatenate the parts of many scenarios (one vectorised evaluation for a whole validation set)."""
    def cat(f: str) -> np.ndarray:
        return np.concatenate([getattr(p, f) for p in parts])

    return ServingParts(stack_parts([p.dec for p in parts]), stack_parts([p.pf for p in parts]),
                        stack_parts([p.wave for p in parts]), cat("concurrency"), cat("cap"), cat("osl"), cat("dp"),
                        cat("n_mla"), cat("n_lin"), cat("per_step"), cat("in_step"), cat("lockstep"), cat("mixed"))


def combine_serving(p: ServingParts, eff: Efficiency) -> dict[str, np.ndarray]:
    """TPOT, TTFT (s) and the TPOT terms from the parts (formulas in the module docstring)."""
    dec, pf, wave = combine_step(p.dec, eff), combine_step(p.pf, eff), combine_step(p.wave, eff)
    ce = np.minimum(p.concurrency, p.cap)
    n = np.maximum(ce / p.dp, 1.0)
    wave_u = wave["step"] / eff.prefill_eff / p.in_step / (pf["step"] / eff.prefill_eff)  # u / t_pf in units
    lock_share = wave_u * (n - wave_wait(n, p.per_step) - 1.0) / np.maximum(p.osl - 1.0, 1.0)
    share = p.mixed * eff.prefill_interference * ((1.0 - p.lockstep) * (ce - 1.0) / (p.osl * p.dp) + p.lockstep * lock_share)
    terms = {k: dec[k] + share * _marginal(pf, k) / eff.prefill_eff for k in TERMS}
    tpot = sum((terms[k] for k in TERMS), np.zeros_like(ce))
    ttft = ttft_s(TtftTimes(pf["step"], pf["overhead"], wave["step"], dec["step"], tpot), TtftQueue.of(p),
                  TtftEfficiency.of(eff))
    out = {"tpot_s": tpot, "ttft_s": ttft, "batch": ce, "step": dec["step"], "floor": dec["floor"],
           "pf_step": pf["step"], "pf_overhead": pf["overhead"],
           "interference_share": share / eff.prefill_eff}  # prefills per decode step, times the marginal terms
    out.update({"term:" + k: v for k, v in terms.items()})
    out.update({k: v for k, v in dec.items() if k.startswith("coll:")})
    return out


def _marginal(pf: dict[str, np.ndarray], term: str) -> np.ndarray | float:
    """A prefill's cost when it rides in a decode step, per TPOT term: its FLOPs (GEMM, experts, attention), its KV
    traffic and the bandwidth part of its collectives; not the weights (the decode step reads them once for every
    token in it), not the collectives' latency (the same calls carry the prompt's rows) nor launch/CPU overhead."""
    if term in ("compute", "kv", "communication"):
        return pf["marginal:" + term]
    return pf[term] if term in ("indexer", "recurrent") else 0.0


def output_tok_s(concurrency: np.ndarray, cap: np.ndarray | float, osl: int | np.ndarray, ttft_s: np.ndarray,
                 tpot_s: np.ndarray) -> np.ndarray:
    """Output tok/s of the instance: min(c, cap) · OSL / (TTFT − slot wait + (OSL − 1) · TPOT); the slot wait (the
    part of TTFT spent waiting for a KV slot when c > cap) is over/(1 + over) of a request's time, over = (c − cap)/cap.
    Numpy-broadcasting in every argument (cap and OSL per point in a grid sweep's screen)."""
    c, cap_ = np.asarray(concurrency, dtype=float), np.asarray(cap, dtype=float)
    over = np.maximum(c - cap_, 0.0) / cap_
    wait = over * (ttft_s + (osl - 1) * tpot_s) / (1.0 + over)
    return np.asarray(np.minimum(c, cap_) * osl / (ttft_s - wait + (osl - 1) * tpot_s))


def predict_arrays(sc: Scenario, concurrency: Sequence[int] | np.ndarray) -> dict[str, Any]:
    """Vectorised predict: arrays keyed like ServingPoint fields (plus per-term arrays and the TTFT parts)."""
    p = serving_parts(sc, concurrency)
    a = combine_serving(p, sc.efficiency)
    c, ce, tpot, ttft = p.concurrency, a["batch"], a["tpot_s"], a["ttft_s"]
    cap = float(p.cap)
    kv = memory.kv_bytes_per_seq(sc, sc.isl + sc.osl)
    mem = memory.weights_bytes_per_gpu(sc) + np.ceil(ce / sc.dp) * kv * (sc.isl + sc.osl / 2.0) / (sc.isl + sc.osl)
    mem = mem + sc.efficiency.reserve_bytes
    return {
        "concurrency": c, "batch": ce, "tpot_s": tpot, "ttft_s": ttft,
        "output_tok_s": output_tok_s(c, p.cap, sc.osl, ttft, tpot),
        "memory_bytes_per_gpu": mem, "max_concurrency": memory.max_concurrency(sc),
        "terms": {k: np.broadcast_to(a["term:" + k], c.shape) for k in TERMS},
        "step": np.broadcast_to(a["step"], c.shape), "floor": np.broadcast_to(a["floor"], c.shape),
        "collectives": {k: (c_.calls, np.broadcast_to(c_.bytes_per_call, c.shape),
                            np.broadcast_to(a["coll:" + k], c.shape)) for k, c_ in p.dec.colls.items()},
        "interference_share": np.broadcast_to(a["interference_share"], c.shape),
        "parts": {"pf_step": float(a["pf_step"]), "pf_overhead": float(a["pf_overhead"]),
                  "dec_step": a["step"], "cap": int(cap), "n_mla": int(p.n_mla), "n_lin": int(p.n_lin)},
    }


def predict(sc: Scenario, concurrency: Sequence[int]) -> list[ServingPoint]:
    """One ServingPoint per concurrency value (aggregated serving, sc.isl/sc.osl per request)."""
    a = predict_arrays(sc, list(concurrency))
    case, prov = scenario_case(sc), provenance(sc)
    (t_lo, t_hi), (f_lo, f_hi) = bounds(case, "tpot"), bounds(case, "ttft")
    out = []
    for i, c in enumerate(concurrency):
        terms = {k: float(a["terms"][k][i]) for k in TERMS}
        colls = {
            public_name(k): CollectiveCost(int(v[0]), float(v[1][i]), float(v[2][i]))  # broadcast by predict_arrays
            for k, v in a["collectives"].items()
        }
        out.append(ServingPoint(
            concurrency=int(c), tpot_s=float(a["tpot_s"][i]), ttft_s=float(a["ttft_s"][i]),
            output_tok_s=float(a["output_tok_s"][i]), memory_bytes_per_gpu=float(a["memory_bytes_per_gpu"][i]),
            max_concurrency=int(a["max_concurrency"]), dominant=max(terms, key=lambda k: terms[k]),
            terms_s=terms, collectives=colls, step_time_s=float(a["step"][i]), floor_s=float(a["floor"][i]),
            batch=int(a["batch"][i]), tpot_low_s=float(a["tpot_s"][i]) * t_lo, tpot_high_s=float(a["tpot_s"][i]) * t_hi,
            ttft_low_s=float(a["ttft_s"][i]) * f_lo, ttft_high_s=float(a["ttft_s"][i]) * f_hi, provenance=prov,
        ))
    return out

