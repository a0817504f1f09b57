"""Engine scheduler knobs: `EngineConfig` and each backend's defaults from specs/data/scheduler.toml (with sources).

What it does: loads the defaults for vllm / sglang / trtllm and applies overrides (max_num_seqs,
max_num_batched_tokens, ...). CUDA-graph capture sizes live with the step model (specs/data/engines.toml,
perfmodel/graphs.py), which pads decode steps itself.
What it does not: schedule anything (scheduler.py) or time anything (stepcost.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from servescope.errors import ScenarioError
from servescope.specs import tables

PRIORITIES = ("decode_first", "prefill_first")
ADMISSIONS = ("on_demand", "reserve_full", "reserve_ratio")


@dataclass(frozen=True)
class EngineConfig:
    """One engine instance's scheduler settings (meanings in specs/data/scheduler.toml)."""

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
    sources: dict[str, str] = field(default_factory=dict)

    def with_(self, **changes: Any) -> EngineConfig:
        """A checked copy with some knobs replaced (None values are ignored)."""
        cfg = replace(self, **{k: v for k, v in changes.items() if v is not None})
        check_engine(cfg)
        return cfg


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tables.scheduler_defaults()


def engine_defaults(backend: str) -> EngineConfig:
    """The backend's defaults; ScenarioError naming the known backends otherwise."""
    t = _table()
    if backend not in t:
        raise ScenarioError(f"no scheduler defaults for backend {backend!r}; known: {', '.join(sorted(t))}")
    s = t[backend]
    cfg = EngineConfig(
        backend=backend, max_num_seqs=int(s["max_num_seqs"]),
        max_num_batched_tokens=int(s["max_num_batched_tokens"]), chunked_prefill=bool(s["chunked_prefill"]),
        priority=str(s["priority"]), admission=str(s["admission"]), block_size_tokens=int(s["block_size_tokens"]),
        graph_mixed_batches=bool(s["graph_mixed_batches"]), sources=dict(s.get("sources", {})),
        reserve_init_ratio=float(s.get("reserve_init_ratio", 0.0)),
        reserve_min_ratio=float(s.get("reserve_min_ratio", 0.0)),
        reserve_decay_steps=float(s.get("reserve_decay_steps", 1.0)),
        kv_mem_fraction=float(s["kv_mem_fraction"]) if "kv_mem_fraction" in s else None,
        kv_mem_of=str(s.get("kv_mem_of", "total")),
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
    if cfg.kv_mem_of not in ("total", "free"):
        raise ScenarioError(f"kv_mem_of {cfg.kv_mem_of!r}; known: total, free")
    if cfg.admission not in ADMISSIONS:
        raise ScenarioError(f"admission {cfg.admission!r}; known: {', '.join(ADMISSIONS)}")
