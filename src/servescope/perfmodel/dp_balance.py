"""The busiest attention-data-parallel rank of a decode step: its KV read and attention FLOPs over the mean rank's.

Under attention-DP (Deployment.dp > 1) each rank holds whole requests and runs attention on its own sequences; the
MoE layers synchronise the ranks every layer, so the busiest rank sets the pace of the step (step.py prices that
rank: ceil(b/dp) sequences).

How the engines assign requests to DP ranks (what makes the per-rank *counts* balanced):
  * SGLang: `--load-balance-method`, default `auto` = `round_robin` outside prefill/decode disaggregation
    (python/sglang/srt/server_args.py `_handle_load_balance_method`; older releases: default "round_robin";
    other choices: shortest_queue / total_requests / total_tokens). A closed loop at fixed ISL/OSL finishes
    requests in arrival order, so the c requests in flight are a window of c consecutive arrivals and round-robin
    leaves every rank ceil(c/dp) or floor(c/dp) of them.
  * vLLM: the DP load balancer of the API server (vllm/v1/engine/core_client.py `DPLBAsyncMPClient.
    get_core_engine_for_request`) sends each request to the engine with the lowest score 4·waiting + running
    (counts from the DP coordinator, refreshed every 100 ms, plus the client's own increments): least loaded.
  * TRT-LLM (PyTorch backend): new requests go, by a heap, to the ranks below the expected count
    ceil((active + new)/dp), fewest active tokens first (tensorrt_llm/_torch/pyexecutor/request_utils.py
    `balance_requests_across_ranks`); `attention_dp_config.enable_balance` (default False: llmapi AttentionDpConfig)
    additionally holds steps back to batch ranks' context phases together (NVIDIA's "ADP Balance Strategy" blog).
    Which active-token measure the heap uses (prompt or running context) is UNVERIFIED here.
So the counts are balanced (ceil(b/dp) on the busiest rank) under round-robin and least-loaded alike; the KV read is
not: the in-flight sequences of a closed-loop benchmark sit at different decode positions, their contexts spread
over [isl, isl + osl] (≈ uniform, mean isl + osl/2 = Deployment.decode_context), and the busiest rank reads its
sequence count × the mean context of *its* sequences. None of the engines' defaults balances by context length
(TRT-LLM's token heap only orders the ranks that have room).
Assumptions: a rank's sequences are independent draws from that spread (a de-synchronised steady state; round-robin
over a window ordered by arrival would stratify them and spread less; synchronised waves — every sequence at one
position — have no spread at all); decode-only measurements hold every sequence at context isl (factor 1).
"""

from __future__ import annotations

import numpy as np

Arr = np.ndarray
# Attention-term kinds (ops.CtxTerm.kind) whose effective tokens grow with the context (`window` / `cap` /
# `ratio_cap` saturate at their parameter: taken as saturated, exact when isl is past the window or cap).
LINEAR_KINDS = ("all", "ratio")


def context_cv(isl: float, osl: float, decode_only: bool = False) -> float:
    """Coefficient of variation of the in-flight contexts (dimensionless): uniform over [isl, isl + osl] gives
    (osl/√12) / (isl + osl/2); 0 for a decode-only measurement (every sequence at context isl)."""
    if decode_only or osl <= 0:
        return 0.0
    return float((osl / np.sqrt(12.0)) / (isl + osl / 2.0))


def attention_imbalance(dp: int, seqs_per_rank: Arr | float, context_cv: float | Arr) -> Arr:
    """Busiest rank's KV bytes (and attention FLOPs) over the mean rank's, at equal counts n per rank (≥ 1):
        1 + sqrt(2·ln(dp)·(1 − 1/dp)) · CV / sqrt(n)
    the normal-tail expected maximum of dp rank means of n contexts (as step.moe_imbalance), capped at 1 + √3·CV (the
    largest context of the uniform spread over its mean: no rank mean exceeds it). 1 for dp = 1."""
    n = np.maximum(np.asarray(seqs_per_rank, dtype=float), 1.0)
    if dp <= 1:
        return np.ones_like(n)
    cv = np.asarray(context_cv, dtype=float)
    f = 1.0 + np.sqrt(2.0 * np.log(dp) * (1.0 - 1.0 / dp)) * cv / np.sqrt(n)
    return np.asarray(np.minimum(f, 1.0 + np.sqrt(3.0) * cv))


def term_factor(kind: str, factor: Arr | float) -> Arr | float:
    """The factor for one attention term (ops.CtxTerm.kind): `factor` where the term's tokens grow with the
    context, 1 where they saturate (sliding window, top-k cap)."""
    return factor if kind in LINEAR_KINDS else 1.0
