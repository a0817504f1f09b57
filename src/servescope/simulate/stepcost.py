"""The one adapter between the simulation and the analytical step model (perfmodel/step.py, serving.py).

A step of the simulation is a composition: decode tokens (one per sequence, each at its own context) and prefill
chunks (n tokens after L tokens of context each). Its time, from the closed-form model's class times
(step.py: step = gemm + moe + attention + communication + kernels + cpu, an exact sum there), is
    step_s = tok_s(T) + Σ_decode attn1(L_i) · ⌈b/dp⌉/b + Σ_chunks attn_pf(n, L) / dp + prefill extra + cpu(b)
  tok_s(T)     gemm + moe + communication + kernel launches of T tokens in the step, spread over the dp attention
               ranks (step_arrays with batch = dp, tokens/seq = T/dp); a pure-decode step takes the decode table
               (the step model pads it to the engine's CUDA-graph size and charges graph launch costs, graphs.py),
               a step with prefill chunks the eager prefill table, or the decode table when the engine runs mixed
               batches as piecewise graphs (vLLM)
  attn1(L)     attention of one decode sequence at context L (memory/compute roofline per sequence; for one
               context it is exactly the closed form's batch attention divided by the batch), tabulated on a grid
               of L and linearly interpolated; where the attention is priced at a measured per-layer curve
               (step.py, measured_ops.py) the sum is replaced by the curve at ⌈b/dp⌉ sequences and the step's mean
               context (a kernel's fixed cost is paid per layer, not per sequence; memory-bound time is linear in
               the total context)
  attn_pf(n,L) attention of a prefill chunk (step_arrays prefill=True), tabulated on a grid (64 chunk sizes from 1
               to the budget, geometric; contexts every 64+ tokens) and interpolated bilinearly
  prefill extra = (tok_s(T) − tok_s(T_decode) + Σ attn_pf / dp, launches excluded) · (1/prefill_eff − 1)
               (efficiency.py: per-layer set-up kernels of the MLA / chunked-scan prefill paths; they are
               launched once per forward pass, whatever the number of prompts batched in it)
  cpu(b)       cpu_overhead_s + cpu_overhead_per_seq_s · b; on an engine that overlaps scheduling with execution
               (specs.engines overlap.enabled) f·cpu(b) + max((1 − f)·cpu(b) − the step's GPU time, 0),
               f = overlap_exposed_frac: perfmodel.combine's host_cpu_s and exposed_host_s themselves (issue 29.6:
               one definition of the scheduling cost between steps for the closed form and the simulation)
  wait         rank-arrival wait, part of the step above: under attention-DP the decode attention is priced at the
               busiest rank (⌈b/dp⌉ sequences), the others wait attn · (1 − (b/dp)/⌈b/dp⌉) for it (0 at dp = 1);
               a trace's measured wait per step (EngineConfig.rank_wait_s) replaces it: step − model wait + measured
               (the last step's GPU time and wait: `last_gpu_s`, `last_wait_s`, recorded by loop.py)
A pure-decode step at one context and an unpadded batch gives exactly the closed form's decode step (under attention-DP,
the closed form's at decode_only: its busiest-rank context-spread factor, dp_balance.py, is not applied here).
Not used here: the closed form's fitted queueing and interference constants (ttft_queue_frac,
prefill_interference): the simulation produces queueing and interference itself. `setup_s` (prefill_overhead_s)
is returned for the loop to add per request outside the GPU (request set-up, tokenisation, first-token sampling),
with the fitted per-layer prefill set-up of MLA and linear-attention models (n_mla · mla_prefill_layer_s +
n_lin · linear_prefill_layer_s), once per request as in the closed form's TTFT; `split_setup` splits it into the
front end (before the queue) and the first-token delivery (after each token; specs/data/serving_boundaries.toml).
What it does not: decide what runs in a step (scheduler.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from servescope.perfmodel.combine import exposed_host_s, host_cpu_s
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import linear_layers, mla_layers
from servescope.perfmodel.step import measured_attention, step_arrays
from servescope.simulate.engine import EngineConfig
from servescope.simulate.token_tables import TokenTables
from servescope.specs.serving_boundaries import delivery

CTX_GRID_TOKENS = 16  # grid step of the per-sequence decode attention table and of the chunk cache key
WINDOW = 512  # steps of a decode run read through the table's strided rows (loop.MAX_RUN_STEPS; longer: a window view)


def _f(a: dict[str, Any], key: str) -> np.ndarray:
    return np.asarray(a[key], dtype=float)


class StepCost:
    """Step times of one scenario under one engine config, with tables built once (vectorised)."""

    def __init__(self, sc: Scenario, cfg: EngineConfig, max_tokens: int, max_ctx: int, table_tokens: int | None = None):
        """Tables for steps of up to `max_tokens` tokens (the engine's budget; the chunk grid spans it) at contexts
        up to `max_ctx`; the per-step-size tables stop at `table_tokens` when the caller knows no step carries
        more (loop.py: `--max-num-seqs 1000000000` needs no billion-entry table)."""
        self.sc, self.cfg, self.dp = sc, cfg, max(1, int(sc.dp))
        eff = sc.efficiency
        top = max_tokens if table_tokens is None else max(1, min(max_tokens, table_tokens))
        # per step size T: gemm + moe + communication + kernel launches of a decode step of T sequences of one token
        # (their routing draws are independent, step.py; it may run as a padded graph) and of a prefill of T tokens
        # in dp chunks, priced a block of sizes at a time as the steps read them (token_tables.py)
        self.tables, self.top = TokenTables(sc, self.dp, top), top
        self.grid = np.arange(0, max_ctx + 2 * CTX_GRID_TOKENS, CTX_GRID_TOKENS, dtype=float)
        # per sequence at its own context: no context spread over the DP ranks to price (the loop holds the contexts;
        # decode_only turns off step.py's statistical busiest-rank factor, dp_balance.py)
        self.attn1 = _f(step_arrays(replace(sc, decode_only=True), self.dp, self.grid, 1), "attention")
        self._attn1_int: np.ndarray | None = None  # attn1 at every integer context (_attn1_at), built on first use
        self._measured_attention_table(replace(sc, decode_only=True), top)
        # the host time between steps: the closed form's own functions (perfmodel.combine), not a copy
        self.eff, self.overlap = eff, bool(sc.overlaps_cpu)
        self.host_scale = 1.0  # a measured decode level scales it with the decode tables (loop.py)
        # rank-arrival wait (boundaries.py): a trace's measured wait per step replaces the model's when given
        self.rank_wait_s = cfg.rank_wait_s
        self.last_gpu_s: Any = 0.0  # the last step(s) priced: GPU time (the rank wait included) and its rank wait
        self.last_wait_s: Any = 0.0
        self.inv_pf_eff_m1 = 1.0 / eff.prefill_eff - 1.0
        # the fitted per-layer prefill set-up of MLA / linear-attention models is a per-request TTFT cost in the
        # closed form (fitted there, on TTFT): charged once per request here too, not to every step that carries a
        # prompt (which charged the decodes riding in that step ~70 ms each time on a 61-layer MLA model, issue 18)
        self.setup_s = float(eff.prefill_overhead_s + mla_layers(sc) * eff.mla_prefill_layer_s
                             + linear_layers(sc) * eff.linear_prefill_layer_s)
        self._chunk_table(max_tokens, max_ctx)

    @property
    def tok_dec_s(self) -> np.ndarray:
        """The decode step-size table over every size (token_tables.TokenTables.whole; tests)."""
        return self.tables.whole()[0]

    @property
    def tok_pf_s(self) -> np.ndarray:
        return self.tables.whole()[1]

    @property
    def kern_pf_s(self) -> np.ndarray:
        return self.tables.whole()[2]

    def scale_decode(self, level: float) -> None:
        """A measured decode level (loop.py): the decode step-size table, the per-sequence attention and the step's
        host time × `level` (each value the product the scaled table held)."""
        self.tables.dec_scale = level
        self.attn1 = self.attn1 * level
        self._attn1_int = None
        self.host_scale = level

    def _measured_attention_table(self, sc: Scenario, top: int) -> None:
        """Where the decode attention is priced at a measured per-layer curve (step.py: not a sum over sequences —
        a kernel's fixed cost is paid once per layer, not per sequence), its time at b sequences per rank and the
        step's mean context: exact b up to 256, geometric beyond; contexts on a grid of ≤ 128 points (linear)."""
        self.att_b: np.ndarray | None = None
        if not measured_attention(sc):
            return
        n = max(1, -(-top // self.dp))
        self.att_b = np.unique(np.concatenate([np.arange(1, min(n, 256) + 1, dtype=float),
                                               np.round(np.geomspace(min(n, 256), max(n, 256), 64))]))
        step = max(64, -(-int(self.grid[-1]) // 128))
        self.att_ctx = np.arange(0, self.grid[-1] + 2 * step, step, dtype=float)
        a = step_arrays(sc, self.att_b[:, None] * self.dp, self.att_ctx[None, :], 1)
        self.att_tab = np.broadcast_to(_f(a, "attention"), (len(self.att_b), len(self.att_ctx)))

    def _measured_attention_s(self, b: int, mean_ctx: np.ndarray) -> np.ndarray:
        """Measured-curve attention of b decode sequences (all ranks) at mean contexts (one value per step)."""
        assert self.att_b is not None
        per_rank = float(-(-b // self.dp))
        i = min(max(int(np.searchsorted(self.att_b, per_rank)), 1), len(self.att_b) - 1)
        b0, b1 = self.att_b[i - 1], self.att_b[i]
        w = min(max((per_rank - b0) / (b1 - b0), 0.0), 1.0)
        ctx = np.asarray(mean_ctx, dtype=float) - 1.0  # the table's context excludes the step's own token
        a0 = np.interp(ctx, self.att_ctx, self.att_tab[i - 1])
        a1 = np.interp(ctx, self.att_ctx, self.att_tab[i])
        return np.asarray(a0 + w * (a1 - a0))

    def _chunk_table(self, max_tokens: int, max_ctx: int) -> None:
        """attn_pf on a grid: chunk sizes geometric from 1 to the step budget, contexts every ≥ 64 tokens."""
        n = np.unique(np.round(np.geomspace(1, max(max_tokens, 2), 64)))
        step = max(64, -(-max_ctx // 2048))
        self.pf_n = n
        self.pf_ctx = np.arange(0, max_ctx + 2 * step, step, dtype=float)
        a = step_arrays(self.sc, self.dp, self.pf_ctx[None, :], n[:, None], prefill=True)
        self.pf_attn = np.broadcast_to(_f(a, "attention"), (len(n), len(self.pf_ctx)))
        self._chunk_memo: dict[tuple[int, int], float] = {}

    def decode_attention_s(self, ctx: np.ndarray) -> float:
        """Σ attention of decode sequences at contexts ctx (tokens attended, the new one included)."""
        b = len(ctx)
        if b == 0:
            return 0.0
        if self.att_b is not None:
            return float(self._measured_attention_s(b, np.array([ctx.mean()]))[0])
        s = float(self._attn1_at(ctx).sum())
        return s * (-(-b // self.dp)) / b

    def _attn1_table(self) -> np.ndarray:
        """attn1 at every integer context 0 … grid[-1]: np.interp once (np.interp is pointwise: the same x, xp and
        fp give the same value, so a lookup here is the interpolation to the bit)."""
        if self._attn1_int is None:
            tab = np.interp(np.arange(int(self.grid[-1]) + 1, dtype=float), self.grid, self.attn1)
            self._attn1_int = tab
            # rows of WINDOW consecutive entries from each context (a strided view of the table padded with zeros,
            # which no read reaches: _whole keeps i + k within the table): a decode run's (b, k) block is
            # _windows[:, :k][i]
            pad = np.concatenate([tab, np.zeros(WINDOW)])
            self._windows = as_strided(pad, (len(tab), WINDOW), (pad.strides[0], pad.strides[0]), writeable=False)
        return self._attn1_int

    def _whole(self, ctx: np.ndarray, span: int) -> np.ndarray | None:
        """ctx as table indices when every context, and every one up to span − 1 more, is a whole token in the
        table; else None (interpolate)."""
        if not ctx.size:
            return None
        i = ctx.astype(np.intp)
        if int(i.min()) < 0 or int(i.max()) + span > len(self._attn1_table()) or not (i == ctx).all():
            return None
        return i

    def _attn1_at(self, ctx: np.ndarray) -> np.ndarray:
        """np.interp(ctx, grid, attn1) to the bit (the loop's contexts are whole tokens: a table lookup)."""
        i = self._whole(ctx, 1)
        out: np.ndarray = np.interp(ctx, self.grid, self.attn1) if i is None else self._attn1_table()[i]
        return out

    def _attn1_run(self, ctx: np.ndarray, k: int) -> np.ndarray:
        """Σ over sequences of attn1 at ctx + j for j < k: np.interp of the (b, k) contexts, summed over axis 0 (the
        same array in the same order, so the same sums), its values read from the integer table when whole."""
        i = self._whole(ctx, k)
        if i is None:
            grid = ctx[:, None] + np.arange(k, dtype=float)[None, :]
            vals = np.interp(grid.ravel(), self.grid, self.attn1).reshape(len(ctx), k)
        else:
            tab = self._attn1_table()
            # row r: the table at i[r] … i[r] + k − 1
            vals = self._windows[:, :k][i] if k <= WINDOW else sliding_window_view(tab, k)[i]
        out: np.ndarray = vals.sum(axis=0)
        return out

    def chunk_attention_s(self, n: np.ndarray, ctx: np.ndarray) -> float:
        """Σ attention of prefill chunks of n tokens after ctx tokens of context (bilinear in the table), each
        chunk's value looked up once per distinct (tokens, context) and kept (an exact function of the pair)."""
        total = 0.0
        memo = self._chunk_memo
        for key in zip(n.tolist(), ctx.tolist(), strict=True):
            v = memo.get(key)
            if v is None:
                v = memo[key] = self._chunk_one(*key)
            total += v
        return total

    def _chunk_one(self, k: int, c: int) -> float:
        """attn_pf of one chunk of k tokens after c tokens of context (bilinear in the table)."""
        i = min(max(int(np.searchsorted(self.pf_n, k)), 1), len(self.pf_n) - 1)
        n0, n1 = self.pf_n[i - 1], self.pf_n[i]
        w = (k - n0) / (n1 - n0)
        a0 = np.interp(c, self.pf_ctx, self.pf_attn[i - 1])
        a1 = np.interp(c, self.pf_ctx, self.pf_attn[i])
        return float(a0 + w * (a1 - a0))

    def decode_run_s(self, ctx: np.ndarray, k: int) -> np.ndarray:
        """Seconds of k successive pure-decode steps of the same sequences, starting at contexts ctx."""
        b = len(ctx)
        if self.att_b is not None:
            attn = self._measured_attention_s(b, ctx.mean() + np.arange(k, dtype=float))
        else:
            attn = self._attn1_run(ctx, k)
            attn *= (-(-b // self.dp)) / b
        run_s: np.ndarray = self._plus_cpu(self.tables.dec(min(b, self.top)) + attn, b,
                                           attn * self._wait_frac(b) if self.dp > 1 else 0.0)
        return run_s

    def host_s(self, gpu_s: Any, seqs: Any) -> Any:
        """The host time a step of `seqs` sequences adds to its GPU time: combine.host_cpu_s (× host_scale) exposed
        as combine.exposed_host_s says — the closed form's functions, so both charge the same cost between steps."""
        cpu = self.host_scale * host_cpu_s(self.eff, seqs)
        return exposed_host_s(cpu, gpu_s, self.overlap, self.eff.overlap_exposed_frac)

    def host_parts(self, gpu_s: Any, seqs: Any) -> tuple[Any, Any]:
        """(host seconds of the step: combine.host_cpu_s × host_scale, what of it is exposed: host_s)."""
        return self.host_scale * host_cpu_s(self.eff, seqs), self.host_s(gpu_s, seqs)

    def _wait_frac(self, b: int) -> float:
        """The share of b decode sequences' attention (priced at the busiest of dp ranks, ⌈b/dp⌉ sequences) that
        the other ranks wait for: 1 − (b/dp)/⌈b/dp⌉ (0 at dp = 1 or b a multiple of dp; the measured-curve path
        taken as proportional to the sequences)."""
        return 1.0 - b / (self.dp * -(-b // self.dp)) if b and self.dp > 1 else 0.0

    def _plus_cpu(self, gpu_s: Any, seqs: int, wait_s: Any = 0.0) -> Any:
        """GPU time plus the step's host time (host_s); `wait_s` of the GPU time is rank-arrival wait (the model's,
        replaced by a trace's `rank_wait_s` when given). Keeps both in `last_gpu_s`, `last_wait_s` (loop.py)."""
        if self.rank_wait_s is not None:
            gpu_s, wait_s = gpu_s - wait_s + self.rank_wait_s, self.rank_wait_s
        self.last_gpu_s, self.last_wait_s = gpu_s, wait_s
        return gpu_s + self.host_s(gpu_s, seqs)

    def step_s(self, dec_ctx: np.ndarray, chunks_n: np.ndarray, chunks_ctx: np.ndarray) -> float:
        """Seconds of one step: decode sequences at contexts dec_ctx, prefill chunks of chunks_n tokens each
        after chunks_ctx tokens (formula in the module docstring)."""
        b_dec, n_chunks = len(dec_ctx), len(chunks_n)
        top, tab = self.top, self.tables
        dec_attn = self.decode_attention_s(dec_ctx)
        wait = dec_attn * self._wait_frac(b_dec) if self.dp > 1 else 0.0
        if not n_chunks:
            return float(self._plus_cpu(tab.dec(min(b_dec, top)) + dec_attn, b_dec, wait))
        t_all = min(b_dec + int(chunks_n.sum()), top)
        tok = tab.dec(t_all) if self.cfg.graph_mixed_batches else tab.pf(t_all)
        pf_attn = self.chunk_attention_s(chunks_n, chunks_ctx) / self.dp
        base = (tab.pf(b_dec) - tab.kern_pf(b_dec)) if b_dec else 0.0
        marginal = tok - tab.kern_pf(t_all) - base + pf_attn
        step = tok + dec_attn + pf_attn
        step += marginal * self.inv_pf_eff_m1
        return float(self._plus_cpu(step, b_dec + n_chunks, wait))


@dataclass(frozen=True)
class Split:
    """The per-request set-up split into the front end (before the queue) and the delivery (after each token)."""

    front_s: float
    delivery_s: float
    sources: dict[str, str]


def split_setup(sc: Scenario, cfg: EngineConfig, setup_s: float) -> Split:
    """front end = setup_s − delivery, delivery = min(the engine release's delivery_s, setup_s)
    (specs/data/serving_boundaries.toml; simulate/boundaries.py's docstring); the sources of both and of the rank
    wait."""
    d = delivery(cfg.backend, sc.engine.version)
    deliver = min(d.delivery_s, max(setup_s, 0.0))
    wait = (f"trace: measured rank-arrival wait {cfg.rank_wait_s:.6g} s per step" if cfg.rank_wait_s is not None
            else "model: attention-DP busiest-rank wait (stepcost.py; 0 at dp = 1)")
    return Split(setup_s - deliver, deliver, {
        "front_end": "model: per-request set-up (efficiency prefill_overhead_s, fitted, + MLA/linear prefill "
                     "set-up) less the delivery",
        "delivery": f"model: specs/data/serving_boundaries.toml [[{cfg.backend}]] since {d.since}: {d.source}",
        "rank_wait": wait})
