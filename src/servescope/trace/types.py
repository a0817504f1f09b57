"""What a loaded trace is: `Trace` (one rank's events table and what the file says about itself), `DeviceInfo`,
and the event-kind vocabulary of the events table (docs/architecture.md §1).

Does: define the types every later stage receives, and the kinds the loaders write into the `kind` column.
Does not: read anything (trace.load, trace.nsys) or import Polars at run time (the CLI imports this module before
Polars, to start rank workers by fork).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import polars as pl

# The `kind` of an event that ran on a GPU (and so counts towards busy time). The loaders also write
# "gpu_user_annotation", "sync", "cuda_runtime", "cpu_op", "user_annotation", "python" and "other".
GPU_EVENT_KINDS = ("kernel", "memcpy", "memset")

TimeUnit = Literal["us", "ns"]


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU from `deviceProperties` (numSms is the CU count on ROCm)."""

    device: int
    name: str
    num_sms: int | None
    max_threads_per_sm: int | None


@dataclass(frozen=True, eq=False)  # eq/hash by identity: a DataFrame has no truth value
class Trace:
    """One loaded trace file (one rank). `events` follows docs/architecture.md §1 and is always in µs;
    `source_time_unit` is the unit the file itself was written in (an ns trace was scaled to µs on load)."""

    path: Path
    rank: int | None
    world_size: int | None
    events: pl.DataFrame
    devices: dict[int, DeviceInfo] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    source_time_unit: TimeUnit = "us"

    def device_info(self, device: int | None) -> DeviceInfo | None:
        """The GPU that `device` is, from what the file carries (`deviceProperties`, Nsight's TARGET_INFO tables):
        its own entry; when that is missing or unnamed and every named entry shares one name, that name (and the
        entries' SM count when they agree): a trace lists the visible GPUs of one node, one model, while the
        kernels may run on a device it does not list (ROCm traces list device 0 for kernels on device 9).
        None when the file names no GPU and counts no SMs for it."""
        own = self.devices.get(device) if device is not None else None
        if own is not None and own.name:
            return own
        names = {d.name for d in self.devices.values() if d.name}
        if len(names) != 1:
            return own
        sms = {d.num_sms for d in self.devices.values() if d.name}
        threads = {d.max_threads_per_sm for d in self.devices.values() if d.name}
        return DeviceInfo(
            device if device is not None else -1, names.pop(),
            own.num_sms if own is not None and own.num_sms else (sms.pop() if len(sms) == 1 else None),
            own.max_threads_per_sm if own is not None and own.max_threads_per_sm else
            (threads.pop() if len(threads) == 1 else None))

    @property
    def has_gpu_events(self) -> bool:
        """True when at least one kernel, memcpy or memset ran on a GPU."""
        return bool(self.events["kind"].is_in(GPU_EVENT_KINDS).any())
