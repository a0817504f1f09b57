"""KV offload to host memory in the simulation (issue 29.4, `--kv-offload cpu:SIZE`): a request the scheduler must
preempt for KV room has its blocks copied to a host tier instead of dropped, and copied back when it is admitted
again — no recompute, but every copy is priced on the GPU's host link.

Model: host blocks = ⌊SIZE / (bytes per block per GPU · GPUs per attention rank)⌋ (each GPU of the rank holds its
shard: loop.kv_blocks' bytes per block); a copy of k blocks takes k · bytes per block per GPU / the GPU's PCIe
bandwidth one way (specs/data/gpus/<gpu>.toml pcie_bw, with its source; the GPUs of a rank copy their shards in
parallel on their own links) and stalls the step it happens in (not overlapped with compute: an upper end; vLLM's
V0 swap space and its CPU offload connectors copy on the step's stream). The GPU KV capacity — and so the running
batch — is unchanged: offload trades recompute for transfers, it never adds capacity for free. Swapped out: a
request preempted with its own blocks (not one that references a shared prefix: prefix.py) while the tier has
room; otherwise it is recomputed as without offload.
Does not: offload prefix-cache blocks for later reuse (LMCache-style), NVMe tiers, or check SIZE against the host's
memory (no host memory in specs: the caller states SIZE).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servescope.errors import ScenarioError
from servescope.perfmodel.memory import kv_bytes_per_seq
from servescope.perfmodel.scenario import Scenario
from servescope.units import gb_to_bytes, gib_to_bytes

_SIZE = re.compile(r"^cpu:\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*(GB|GiB|TB)?\s*$", re.IGNORECASE)
MAX_OFFLOAD_BYTES = 64e12  # 64 TB: beyond any host's memory; a larger value is a typo


@dataclass(frozen=True)
class Offload:
    """The host tier of one instance: blocks it holds and seconds to copy one block one way."""

    host_blocks: int
    s_per_block: float
    bytes_per_block_gpu: float
    pcie_bw_bytes_per_s: float
    size_bytes: float


def parse_offload(text: str | None) -> float:
    """`--kv-offload cpu:SIZE` -> SIZE in bytes (GB = 1e9 unless GiB or TB is written); 0 for None; ScenarioError
    for anything else (another tier, a size ≤ 0 or above MAX_OFFLOAD_BYTES)."""
    if text is None:
        return 0.0
    m = _SIZE.match(text.strip())
    if m is None:
        raise ScenarioError(f"--kv-offload {text!r}: expected cpu:SIZE (GB, e.g. cpu:256 or cpu:256GiB)")
    value, unit = float(m.group(1)), (m.group(2) or "GB").lower()
    size = gib_to_bytes(value) if unit == "gib" else gb_to_bytes(value * (1000.0 if unit == "tb" else 1.0))
    if not 0 < size <= MAX_OFFLOAD_BYTES:
        raise ScenarioError(f"--kv-offload {text!r}: the size must be above 0 and at most 64 TB")
    return size


def offload_for(sc: Scenario, block_size_tokens: int, size_bytes: float) -> Offload | None:
    """The host tier of `size_bytes` for the scenario (None when 0): block bytes as loop.kv_blocks sizes them."""
    if size_bytes <= 0:
        return None
    ref = float(sc.isl + sc.osl)
    per_block = kv_bytes_per_seq(sc, ref) / ref * block_size_tokens
    gpus_per_rank = max(1, int(sc.n_gpus) // max(1, int(sc.dp)))
    bw = float(sc.gpu.pcie_bw_bytes_per_s)
    if per_block <= 0 or bw <= 0:
        return None
    return Offload(int(size_bytes // (per_block * gpus_per_rank)), per_block / bw, per_block, bw, size_bytes)
