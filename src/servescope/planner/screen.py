"""The screening tier of a grid sweep (issue 30.4): layouts × quantisations × ISL × OSL × concurrencies, the
closed form over the whole grid in NumPy, from the real step model evaluated at anchors.

Per structural configuration (a layout and a quantisation of the base scenario: what changes the model's ops and
collectives) the step model itself (perfmodel.step.step_parts, numpy-broadcasting) is evaluated
  decode:  in LEN_ANCHORS × LEN_ANCHORS length scenarios (ISLs and OSLs of the grid, geometric: the step reads the
           scenario's lengths for the DP ranks' context spread and the measured curves' verdict), each over the
           batch anchors (1, the grid's concurrencies, both sides of each CUDA-graph capture size times dp) ×
           CTX_ANCHORS decode contexts (geometric over the grid's isl + osl/2, plus the length scenarios' own);
  prefill: exact: one request per attention-DP rank at every ISL of the grid, and each synchronised wave's step at
           every (ISL, requests in the step) pair the grid reaches;
then each efficiency-free part of the decode step (StepParts: bytes and FLOPs over their ceilings, collectives,
kernel counts — affine in tokens and KV length between anchors, flat in the padded batch between capture sizes,
except the distinct experts touched, the per-rank batch rounding and the measured curves' bends) is interpolated
multilinearly in (isl, osl, batch, context) to every point, and the real serving combination
(perfmodel.serving.combine_serving, output_tok_s) turns the parts into TPOT, TTFT and output tok/s: the
max(memory, compute) per class, collectives and overheads are applied by the model's own code. The KV slots per
point (memory.max_concurrency at the point's mean context) are exact.
The screen is the full closed form at the anchor points (both lengths anchors, the concurrency within the KV
slots); its error elsewhere is measured on held-out points (planner.sweep_grid.screen_error) and used as the
margin of the exact tier's selection.
Memory: `grid_bytes` estimates what the screen holds before anything is built; `check_budget` refuses a grid
above the budget with its size.
Speculative settings (planner.sweep_spec): a configuration with one also interpolates the parts of its iteration's
steps (verify over k+1 tokens per sequence, the drafter's forwards; batch anchors also at the graph-padding edges of
those tokens), combines each with the model's code and prices the iteration and the point as sweep_spec does.
What it does not: the calibrated restatement (--measured), measure its error or pick points (planner.sweep_grid).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from servescope.errors import ScenarioError, ServescopeError
from servescope.planner.layouts import Layout, layouts
from servescope.planner.screen_anchors import (
    Corners,
    batch_anchors,
    brackets,
    ctx_anchors,
    pick_anchors,
)
from servescope.planner.sweep_spec import (
    SpecPricing,
    SpecSetting,
    batch_edges,
    fixed_affine,
    iteration_from_parts,
    iteration_parts,
    pricing,
    spec_serving,
)
from servescope.units import MIB

if TYPE_CHECKING:
    from servescope.perfmodel.scenario import Scenario
    from servescope.perfmodel.serving import ServingParts
    from servescope.perfmodel.step_types import StepParts

# Context anchors per configuration (geometric over the grid's decode contexts): more did not lower the sampled
# error (measured: 5, 9, 17, 33 gave the same on qwen3-30b-a3b; the error came from the lengths and the batch).
CTX_ANCHORS = 9
# ISL and OSL anchors per configuration (length scenarios the decode step is evaluated in): 3 → 5 halved the largest
# sampled error on a 27,648-point grid (qwen3-30b-a3b, 4× H100: 0.8 % → 0.3 %; llama-3.1-8b: 0.7 % → 0.3 %).
LEN_ANCHORS = 5
DEFAULT_MAX_GRID_MIB = 2048
# Bytes the screen holds per grid point: the results (config, TPOT, TTFT, output tok/s, index arithmetic: 8 float64
# / int64 columns) kept for the whole grid.
RESULT_BYTES_PER_POINT = 8 * 8
# ... and per point of one configuration while it is priced: ~31 interpolated step parts, the prefill and wave
# parts gathered to the point, the serving combination's temporaries (about 200 float64 arrays, measured on the
# bench grid's peak RSS: bench/RESULTS.md).
WORK_BYTES_PER_POINT = 200 * 8
# ... and more per point of a speculative configuration: up to 4 more steps' interpolated parts and their combinations
# (assumption: as many again as a plain configuration's; bench/bench_sweep_grid.py measures the peak RSS).
SPEC_WORK_BYTES_PER_POINT = 200 * 8
QUANTITIES = ("tpot_s", "ttft_s", "output_tok_s")


@dataclass(frozen=True)
class Grid:
    """The axes of a grid sweep; "base" in `quants` keeps the base scenario's quantisation."""

    n_gpus: int
    moe: bool
    concurrency: tuple[int, ...]
    isl: tuple[int, ...]
    osl: tuple[int, ...]
    quants: tuple[str, ...] = ("base",)
    specs: tuple[SpecSetting, ...] = (SpecSetting(),)

    @property
    def layouts(self) -> list[Layout]:
        return layouts(self.n_gpus, self.moe)

    @property
    def per_config(self) -> int:
        return len(self.concurrency) * len(self.isl) * len(self.osl)

    @property
    def size(self) -> int:
        return len(self.layouts) * len(self.quants) * len(self.specs) * self.per_config


def grid_bytes(grid: Grid) -> int:
    """Estimated bytes the screen holds: size · RESULT_BYTES_PER_POINT + per_config · WORK_BYTES_PER_POINT (+
    SPEC_WORK_BYTES_PER_POINT with a speculative setting)."""
    spec = SPEC_WORK_BYTES_PER_POINT if any(s.on for s in grid.specs) else 0
    return grid.size * RESULT_BYTES_PER_POINT + grid.per_config * (WORK_BYTES_PER_POINT + spec)


def check_budget(grid: Grid, max_bytes: float) -> None:
    """ScenarioError (one line, the grid's size) when `grid_bytes` exceeds `max_bytes`; nothing is built first."""
    need = grid_bytes(grid)
    if need > max_bytes:
        raise ScenarioError(
            f"sweep grid of {grid.size:,} points ({len(grid.layouts)} layouts × {len(grid.quants)} quantisations × "
            f"{len(grid.specs)} speculative settings × "
            f"{len(grid.isl)} ISL × {len(grid.osl)} OSL × {len(grid.concurrency)} concurrencies) needs about "
            f"{need / MIB:,.4g} MiB, above the {max_bytes / MIB:,.4g} MiB budget (--max-grid-mib)")


def check_axes(grid: Grid) -> None:
    """ScenarioError naming the axis when one is empty or holds a value below 1."""
    for name in ("concurrency", "isl", "osl", "quants", "specs"):
        vals = getattr(grid, name)
        if not vals:
            raise ScenarioError(f"sweep grid: --{name.rstrip('s')} is empty")
        if name not in ("quants", "specs") and min(vals) < 1:
            raise ScenarioError(f"sweep grid: --{name} holds {min(vals)}; every value must be at least 1")


def quant_scenario(base: Scenario, name: str) -> Scenario:
    """The base scenario with every weight part in scheme `name` (QuantConfig.uniform), its KV format kept; "base"
    keeps the base's, "native" the checkpoint's own."""
    from servescope.specs.quant import QuantConfig

    if name == "base":
        return base
    qc = base.model.native_quant if name == "native" else QuantConfig.uniform(name)
    return base.with_(quant=replace(qc, kv=base.quant.kv))


@dataclass(frozen=True)
class Config:
    """One structural configuration of the grid: a layout, a quantisation and a speculative setting (its pricing,
    None when off), as a checked scenario."""

    layout: Layout
    quant: str
    scenario: Scenario
    spec: SpecPricing | None = None

    @property
    def setting(self) -> SpecSetting:
        return self.spec.setting if self.spec is not None else SpecSetting()

    def label(self) -> str:
        return (self.layout.label() + ("" if self.quant == "base" else f" {self.quant}")
                + ("" if self.spec is None else f" {self.spec.setting.label()}"))


def configs(base: Scenario, grid: Grid) -> tuple[list[Config], list[str]]:
    """The grid's configurations the model accepts, and a "<label>: <reason>" line for each it rejects."""
    from servescope.planner.sweep import layout_scenario

    out, skipped = [], []
    for qn in grid.quants:
        sc_q = quant_scenario(base, qn)  # an unknown scheme is the user's typo: UnknownName, not a skipped layout
        for setting in grid.specs:
            for lay in grid.layouts:
                label = lay.label() + ("" if qn == "base" else f" {qn}") + ("" if not setting.on
                                                                            else f" {setting.label()}")
                try:
                    sc = layout_scenario(sc_q, lay)
                    out.append(Config(lay, qn, sc, pricing(sc, setting)))
                except ServescopeError as e:
                    skipped.append(f"{label}: {e}")
    return out, skipped


def _corners(ax: Axes, ce: np.ndarray, ctx: np.ndarray, a: Anchors) -> Corners:
    """Each point's corners among the anchors in (isl, osl, batch, context)."""
    br = [brackets(a.isl, ax.isl), brackets(a.osl, ax.osl), brackets(a.batch, ce), brackets(a.ctx, ctx)]
    return Corners.of((len(a.isl), len(a.osl), len(a.batch), len(a.ctx)), br)


def _decode_parts(scens: list[list[Scenario]], tokens: int, corners: Corners, a: Anchors) -> StepParts:
    """A decode step's parts at each point: step_parts at every length anchor scenario (`scens[i][o]` at isl_a,
    osl_a: the step reads the scenario's lengths for the DP ranks' context spread and the measured curves'
    verdict) over batch anchors × context anchors, `tokens` per sequence, interpolated multilinearly in (isl, osl,
    batch, context)."""
    from servescope.perfmodel.step import step_parts

    shape = (len(a.batch), len(a.ctx))
    grid = [[step_parts(sc, a.batch[:, None], a.ctx[None, :], tokens) for sc in row] for row in scens]

    def table(f: str) -> np.ndarray:
        return np.array([[np.broadcast_to(np.asarray(getattr(p, f), dtype=float), shape) for p in row]
                         for row in grid])

    return _parts({f: corners.at(table(f)) for f in _fields()})


def _fields() -> tuple[str, ...]:
    """StepParts' array fields (all but the per-collective detail)."""
    from dataclasses import fields

    from servescope.perfmodel.step_types import StepParts

    return tuple(f.name for f in fields(StepParts) if f.name != "colls")


def _parts(cols: dict[str, np.ndarray]) -> StepParts:
    from servescope.perfmodel.step_types import StepParts

    return StepParts(**cols, colls={})  # type: ignore[arg-type]


def _prefill_parts(sc: Scenario, ax: Axes, in_step: np.ndarray) -> tuple[StepParts, StepParts]:
    """One request's prefill per attention-DP rank and each wave's prefill step, exact: step_parts in the scenario
    at each ISL of the grid, over the requests-in-step values the points reach there."""
    from servescope.perfmodel.step import step_parts

    n = len(ax.c)
    pf_cols: dict[str, np.ndarray] = {}
    wave_cols: dict[str, np.ndarray] = {}
    for isl in np.unique(ax.isl):
        rows = np.flatnonzero(ax.isl == isl)
        s_i = sc.with_(isl=int(isl))
        ks, inv = np.unique(in_step[rows], return_inverse=True)
        pf = step_parts(s_i, sc.dp, 0, float(isl), prefill=True)
        wave = step_parts(s_i, sc.dp * ks, 0, float(isl), prefill=True)
        for cols, p, at in ((pf_cols, pf, None), (wave_cols, wave, inv)):
            for f in _fields():
                v = np.asarray(getattr(p, f), dtype=float)
                col = cols.setdefault(f, np.empty(n))
                col[rows] = np.broadcast_to(v, (len(ks),))[at] if at is not None else v
    return _parts(pf_cols), _parts(wave_cols)


def slots(sc: Scenario, ctx: np.ndarray) -> np.ndarray:
    """KV slots at each mean context (serving_parts' cap: memory.max_concurrency at the context, at most the
    engine's max_num_seqs · dp, at least 1), exact per distinct context."""
    from servescope.perfmodel import memory

    limit = sc.engine.scheduler.max_num_seqs * sc.dp
    vals, inv = np.unique(ctx, return_inverse=True)
    caps = np.array([max(min(memory.max_concurrency(sc, float(v)), limit), 1) for v in vals], dtype=float)
    return caps[inv].reshape(ctx.shape)


@dataclass(frozen=True)
class Axes:
    """One configuration's points (c fastest, then OSL, then ISL), as flat arrays."""

    c: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    isl_index: np.ndarray

    @classmethod
    def of(cls, grid: Grid) -> Axes:
        ii, oi, ci = np.meshgrid(np.arange(len(grid.isl)), np.arange(len(grid.osl)), np.arange(len(grid.concurrency)),
                                 indexing="ij")
        isl, osl, c = (np.asarray(v, dtype=float) for v in (grid.isl, grid.osl, grid.concurrency))
        return cls(c[ci.ravel()], isl[ii.ravel()], osl[oi.ravel()], ii.ravel())


@dataclass(frozen=True)
class Anchors:
    """Where one configuration's decode step is evaluated: length scenarios (isl × osl), batches, contexts."""

    isl: np.ndarray
    osl: np.ndarray
    batch: np.ndarray
    ctx: np.ndarray

    @classmethod
    def of(cls, sc: Scenario, grid: Grid, ctx: np.ndarray, n_len: int = LEN_ANCHORS,
           n_ctx: int = CTX_ANCHORS, pr: SpecPricing | None = None) -> Anchors:
        isl, osl = pick_anchors(grid.isl, n_len), pick_anchors(grid.osl, n_len)
        own = (isl[:, None] + (0.0 if sc.decode_only else osl[None, :] / 2.0)).ravel()  # the anchor scenarios' contexts
        batch = np.unique(np.concatenate([batch_anchors(sc, grid.concurrency),
                                          batch_edges(sc, pr, float(max(grid.concurrency)))]))
        return cls(isl, osl, batch, ctx_anchors(ctx, own, n_ctx))

    def holds(self, ax: Axes) -> np.ndarray:
        """Points whose lengths are both anchors (their context is then one too): the screen is exact there up to
        the batch (exact where the concurrency fits the KV slots)."""
        return np.isin(ax.isl, self.isl) & np.isin(ax.osl, self.osl)


def screen_config(sc: Scenario, grid: Grid, ax: Axes | None = None, n_len: int = LEN_ANCHORS,
                  n_ctx: int = CTX_ANCHORS, pr: SpecPricing | None = None) -> dict[str, np.ndarray]:
    """TPOT, TTFT (s) and output tok/s at every point of one configuration (Axes order; `pr`: its speculative
    setting), from the step model at the anchors (module docstring); `on_anchor`: the points where the screen is the
    full closed form; `capped`: the points past their KV slots (their batch, the slots, lies between anchors)."""
    from servescope.perfmodel.serving import (
        ServingParts,
        combine_serving,
        linear_layers,
        mla_layers,
        output_tok_s,
    )

    ax = ax or Axes.of(grid)
    ctx = ax.isl if sc.decode_only else ax.isl + ax.osl / 2.0
    cap = slots(sc, ax.isl + ax.osl / 2.0)
    ce = np.minimum(ax.c, cap)
    anchors = Anchors.of(sc, grid, ctx, n_len, n_ctx, pr)
    corners = _corners(ax, ce, ctx, anchors)
    at_len = [[sc.with_(isl=int(i), osl=int(o)) for o in anchors.osl] for i in anchors.isl]
    dec = _decode_parts(at_len, 1, corners, anchors)
    per_step = np.maximum(1, sc.engine.scheduler.max_num_batched_tokens // np.maximum(ax.isl, 1)).astype(float)
    in_step = np.minimum(per_step, np.ceil(ce / sc.dp))
    pf, wave = _prefill_parts(sc, ax, in_step)
    n = len(ax.c)

    def full(x: float) -> np.ndarray:
        return np.full(n, float(x))

    p = ServingParts(dec, pf, wave, ax.c, cap, ax.osl, full(sc.dp), full(mla_layers(sc)), full(linear_layers(sc)),
                     per_step, in_step, full(float(sc.engine.scheduler.lockstep_waves)),
                     full(0.0 if sc.decode_only else 1.0))
    a = combine_serving(p, sc.efficiency)
    flags = {"on_anchor": anchors.holds(ax) & (ax.c <= cap), "capped": ax.c > cap}
    if pr is not None:
        return {**_spec_values(sc, pr, p, a, at_len, corners, anchors), **flags}
    tok = output_tok_s(ax.c, cap, ax.osl, a["ttft_s"], a["tpot_s"])
    return {"tpot_s": a["tpot_s"], "ttft_s": a["ttft_s"], "output_tok_s": tok, **flags}


def _spec_values(sc: Scenario, pr: SpecPricing, p: ServingParts, a: dict[str, np.ndarray],
                 at_len: list[list[Scenario]], corners: Corners, anchors: Anchors) -> dict[str, np.ndarray]:
    """A speculative configuration's TPOT, TTFT and output tok/s: each step of the iteration (sweep_spec
    .iteration_parts) interpolated like the decode step, the iteration from them (sweep_spec.iteration_from_parts),
    the point from the iteration (sweep_spec.spec_serving)."""
    per_len = [[iteration_parts(s, pr) for s in row] for row in at_len]
    roles = per_len[0][0]
    parts = {role: _decode_parts([[pl[j][1] for pl in row] for row in per_len], tokens, corners, anchors)
             for j, (role, _, tokens, _) in enumerate(roles)}
    fixed = fixed_affine(sc, pr.drafter(sc), pr)
    it = iteration_from_parts(parts, [(r, m) for r, _, _, m in roles], a["batch"], pr, fixed, sc.efficiency)
    return spec_serving(p, a, it, pr.al, sc.efficiency)


@dataclass(frozen=True)
class Screened:
    """The screened grid: per configuration block of `grid.per_config` points (Axes order) the three quantities."""

    grid: Grid
    configs: tuple[Config, ...]
    skipped: tuple[str, ...]
    values: dict[str, np.ndarray]  # QUANTITIES, each (len(configs) · per_config,)
    on_anchor: np.ndarray  # bool per point: the screen is the full closed form there (Anchors.holds, c ≤ slots)
    capped: np.ndarray  # bool per point: the concurrency is past the KV slots (the batch is interpolated)

    @property
    def spec(self) -> np.ndarray:
        """bool per point: its configuration has a speculative setting."""
        return np.repeat(np.array([c.spec is not None for c in self.configs]), self.grid.per_config)

    def where(self, i: int) -> tuple[Config, int, int, int]:
        """Point i's configuration, ISL, OSL and concurrency."""
        g = self.grid
        k, r = divmod(int(i), g.per_config)
        ii, r = divmod(r, len(g.osl) * len(g.concurrency))
        oi, ci = divmod(r, len(g.concurrency))
        return self.configs[k], g.isl[ii], g.osl[oi], g.concurrency[ci]


def screen_grid(base: Scenario, grid: Grid, max_bytes: float = DEFAULT_MAX_GRID_MIB * MIB,
                n_len: int = LEN_ANCHORS, n_ctx: int = CTX_ANCHORS) -> Screened:
    """Every point of the grid screened (`screen_config` per configuration), after `check_budget`."""
    check_axes(grid)
    check_budget(grid, max_bytes)
    cfgs, skipped = configs(base, grid)
    if not cfgs:
        raise ScenarioError(f"no layout of {grid.n_gpus} GPUs fits: " + "; ".join(skipped[:3]))
    ax = Axes.of(grid)
    blocks = [screen_config(c.scenario, grid, ax, n_len, n_ctx, c.spec) for c in cfgs]
    values = {q: np.concatenate([b[q] for b in blocks]) for q in QUANTITIES}
    on_anchor, capped = (np.concatenate([b[k] for b in blocks]) for k in ("on_anchor", "capped"))
    return Screened(grid, tuple(cfgs), tuple(skipped), values, on_anchor, capped)
