"""Engine scheduler knobs: `EngineConfig` and `scheduler_config`, the knobs an engine record schedules with.

What it does: `scheduler_config(engine)` takes the resolved engine record (specs.engines `engine(backend, version,
hbm_bytes)`: the scenario's engine, release and GPU memory, a source per value — the same record the closed form
prices first-token waves and CUDA graphs with) to the simulation's knobs, and `EngineConfig.with_` applies
overrides (max_num_seqs, max_num_batched_tokens, ...). CUDA-graph capture sizes stay with the step model
(perfmodel/graphs.py, from the same record), which pads decode steps itself.
What it does not: schedule anything (scheduler.py), time anything (stepcost.py) or read any file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from servescope.errors import ScenarioError
from servescope.specs.engines import Engine

PRIORITIES = ("decode_first", "prefill_first")
ADMISSIONS = ("on_demand", "reserve_full", "reserve_ratio")


@dataclass(frozen=True)
class EngineConfig:
    """One engine instance's scheduler settings (meanings in the header of specs/data/engines/vllm.toml)."""

    backend: str
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    priority: str
    admission: str
    block_size_tokens: int
    graph_mixed_batches: bool
    max_model_len: int | None = None  # context limit (prompt + output), tokens; None = KV capacity only
    reserve_init_ratio: float = 0.0  # reserve_ratio admission: share of remaining output tokens held back
    reserve_min_ratio: float = 0.0  # ... decaying linearly to this share
    reserve_decay_steps: float = 1.0  # ... over this many steps (reset to the initial share on a retraction)
    kv_mem_fraction: float | None = None  # share of memory for the KV pool (None: the memory model's generic share)
    kv_mem_of: str = "total"  # ... of the whole HBM ("total") or of what weights and activations leave ("free")
    # a measured decode level (calibrate.figure_fit via `simulate --measured`): the decode tables × this (loop.py)
    decode_level: float = 1.0
    # a trace's measured rank-arrival wait per step, s (simulate/boundaries.py): replaces the model's (stepcost.py)
    rank_wait_s: float | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def with_(self, **changes: Any) -> EngineConfig:
        """A checked copy with some knobs replaced (None values are ignored)."""
        cfg = replace(self, **{k: v for k, v in changes.items() if v is not None})
        check_engine(cfg)
        return cfg


def scheduler_config(eng: Engine) -> EngineConfig:
    """The simulation's knobs of an engine record (its scheduler, graphs and memory sections, with their sources).
    The KV share stays None: the simulation sizes the pool as the closed form does (memory.usable_bytes_per_gpu,
    from the same record), unless a caller sets kv_mem_fraction."""
    s, g, m = eng.scheduler, eng.graphs, eng.memory
    cfg = EngineConfig(
        backend=eng.backend, max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        chunked_prefill=s.chunked_prefill, priority=s.priority, admission=s.admission,
        block_size_tokens=m.block_size_tokens, graph_mixed_batches=g.mixed_batches,
        reserve_init_ratio=s.reserve_init_ratio, reserve_min_ratio=s.reserve_min_ratio,
        reserve_decay_steps=s.reserve_decay_steps, kv_mem_of=m.kv_mem_of,
        sources={**s.sources, "block_size_tokens": m.sources["block_size_tokens"],
                 "graph_mixed_batches": g.sources["mixed_batches"]},
    )
    check_engine(cfg)
    return cfg


def check_engine(cfg: EngineConfig) -> None:
    """ScenarioError for knobs no engine accepts."""
    if cfg.max_num_seqs < 1 or cfg.max_num_batched_tokens < 1 or cfg.block_size_tokens < 1:
        raise ScenarioError(f"max_num_seqs={cfg.max_num_seqs}, max_num_batched_tokens="
                            f"{cfg.max_num_batched_tokens} and block size {cfg.block_size_tokens} must be >= 1")
    if cfg.priority not in PRIORITIES:
        raise ScenarioError(f"priority {cfg.priority!r}; known: {', '.join(PRIORITIES)}")
    if cfg.kv_mem_fraction is not None and not 0.0 < cfg.kv_mem_fraction <= 1.0:
        raise ScenarioError(f"kv_mem_fraction={cfg.kv_mem_fraction} must be within (0, 1]")
    if not cfg.decode_level > 0.0:
        raise ScenarioError(f"decode_level={cfg.decode_level} must be > 0")
    if cfg.rank_wait_s is not None and not cfg.rank_wait_s >= 0.0:
        raise ScenarioError(f"rank_wait_s={cfg.rank_wait_s} must be >= 0 (seconds per step)")
    if cfg.kv_mem_of not in ("total", "free"):
        raise ScenarioError(f"kv_mem_of {cfg.kv_mem_of!r}; known: total, free")
    if cfg.admission not in ADMISSIONS:
        raise ScenarioError(f"admission {cfg.admission!r}; known: {', '.join(ADMISSIONS)}")
