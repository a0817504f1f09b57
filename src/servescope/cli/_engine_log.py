"""`--engine-log` on `model` and `plan`: the KV capacity an engine log states, set on the scenario (as `simulate`
takes it), and the per-position acceptance (plan).

The closed form sizes the KV pool from a share of GPU memory (perfmodel.memory); a log's capacity (vLLM 'GPU KV
cache size: N tokens', SGLang 'max_total_num_tokens=N'; validation.enginelog) is set as the share that holds
exactly N tokens at the scenario's KV format:
  per GPU  bytes = N / dp × KV bytes per token (memory.kv_bytes_per_seq at 1 token)
  share    of "total": (bytes + weights + reserve) / HBM;  of "free": bytes / (HBM − weights − reserve)
(the engine's own accounting, deployment.memory_share). A capacity that needs more than the GPU's memory at this
KV format is refused, naming the log and both formats to check (--kv-quant).
Does not: read the log's other numbers for the closed form (simulate takes the scheduler limits).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from servescope.cli._app import note

if TYPE_CHECKING:
    from servescope.perfmodel import Scenario
    from servescope.validation.enginelog import EngineLog


def read_log(path: Path) -> EngineLog:
    """The engine log, its warnings said on stderr after the result (notes: an error stays one line)."""
    from servescope.validation.enginelog import read_engine_log

    log = read_engine_log(path)
    for w in log.warnings:
        note(f"warning: {w}")
    return log


def with_logged_kv(sc: Scenario, log: EngineLog) -> Scenario:
    """The scenario whose KV pool holds the log's capacity (module docstring); unchanged when the log states none.
    ScenarioError when the capacity cannot fit on the GPU at this KV format."""
    from servescope.errors import ScenarioError
    from servescope.perfmodel.memory import kv_bytes_per_seq, weights_bytes_per_gpu

    tokens = log.kv_cache_tokens
    if not tokens:
        return sc
    need = tokens / sc.dp * kv_bytes_per_seq(sc, 1.0)
    rest = sc.efficiency.reserve_bytes + weights_bytes_per_gpu(sc)
    hbm = float(sc.gpu.hbm_bytes)
    of = sc.memory_share[1]
    share = (need + rest) / hbm if of == "total" else need / max(hbm - rest, 1.0)
    if not 0.0 < share <= 1.0:
        raise ScenarioError(f"{log.path}: a KV cache of {tokens:,} tokens at KV format {sc.quant.kv.name} needs "
                            f"{need / 1e9:.1f} GB per GPU beside {rest / 1e9:.1f} GB of weights and reserve on "
                            f"{sc.gpu.name} ({hbm / 1e9:.0f} GB); check --kv-quant (the engine's --kv-cache-dtype)")
    note(f"{log.path}: KV cache of {tokens:,} tokens (from the log) is a memory share of {share:.3f} of the "
         f"{'total' if of == 'total' else 'free'} memory at KV format {sc.quant.kv.name}")
    return sc.with_(gpu_memory_utilization=share)
