"""msgspec types for Kineto (PyTorch profiler) JSON traces: only the fields servescope reads.

What it does: declares the few top-level keys, `deviceProperties`/`distributedInfo` entries and event
fields we use. msgspec skips every other key while decoding without building Python objects, which is
what keeps loading fast and small (python_function args, Input Dims, occupancy dicts are never built).
The collective args (`Collective name`, `In/Out msg nelems`, `Group size`, `dtype`, `Process Group
Name`) are read too: they are few (one record_param_comms op and one kernel per collective call).
`Input Dims` and `Input type` are kept as `msgspec.Raw`: a slice that references the chunk's input
buffer (no copy, no objects built; measured: 10^5 Raws hold 10^5 references to one buffer), decoded
by `_frame` only for the custom all-reduce ops that carry no collective args (`vllm::all_reduce`,
`symm_mem::*all_reduce*`), copied as text for the few op names the cost models size (`_shapes.SHAPED_OPS`),
and then dropped with the chunk, so no Raw outlives its chunk.
Scalars are loose unions (`Num`) so one odd value (a string pid, a huge `Comms Id`-sized integer, a
float where an int was expected) does not fail the whole file; the frame builder casts them.
What it does not do: validate or convert values — see `_frame.py`.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct, field

# One JSON scalar of any kind; msgspec allows one int, one float and one str type in a union.
Num = int | float | str | None
# grid/block are 3-lists of ints in Kineto; a scalar is tolerated (read as unknown). A list holding
# non-ints sends its chunk of events to the slow, per-event path (see _read._decode_events).
Dims = list[int] | Num
# msgspec cannot put Raw in a union with None: an absent raw arg is this empty Raw (len 0).
NO_RAW = msgspec.Raw()


class Args(Struct, gc=False):
    """The `args` keys of an event that the events table needs."""

    external_id: Num = field(default=None, name="External id")
    external_id_old: Num = field(default=None, name="external id")  # 2021-era spelling
    correlation: Num = None
    device: Num = None
    stream: Num = None
    grid: Dims = None
    block: Dims = None
    blocks_per_sm: Num = field(default=None, name="blocks per SM")
    # Collective args: on record_param_comms cpu_ops (PyTorch >= 2.1) and on NCCL kernels themselves.
    coll_name: Num = field(default=None, name="Collective name")
    in_nelems: Num = field(default=None, name="In msg nelems")
    out_nelems: Num = field(default=None, name="Out msg nelems")
    group_size: Num = field(default=None, name="Group size")
    dtype: Num = None
    pg_name: Num = field(default=None, name="Process Group Name")
    nbytes: Num = field(default=None, name="bytes")  # bytes moved, on memcpy/memset rows
    # record_shapes args, as raw JSON (see the module docstring); NO_RAW (empty) when absent.
    input_dims: msgspec.Raw = field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = field(default=NO_RAW, name="Input type")


class Event(Struct, gc=False):
    """One trace event (Chrome trace format) restricted to the fields we read."""

    ph: Num = None
    cat: Num = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: Num = None
    dur: Num = None
    args: Args | None = None


class DeviceProps(Struct, gc=False):
    """One `deviceProperties` entry (one per visible device)."""

    id: Num = None
    name: Num = None
    numSms: Num = None
    maxThreadsPerMultiprocessor: Num = None


class DistInfo(Struct, gc=False):
    """`distributedInfo`: only rank and world size."""

    rank: Num = None
    world_size: Num = None


# Top-level keys kept in Trace.metadata (as strings) when present.
METADATA_KEYS = (
    "schemaVersion",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "traceName",
    "trace_id",
    "vllm_version",
    "sglang_version",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "roctracer_version",
    "hip_runtime_version",
    "hip_driver_version",
    "record_shapes",
    "with_stack",
    "with_flops",
    "profile_memory",
)


class TopLevel(Struct, gc=False):
    """The top-level keys of a Kineto trace object that we read (all but the events)."""

    deviceProperties: list[DeviceProps] | None = None
    distributedInfo: DistInfo | None = None
    schemaVersion: Num = None
    displayTimeUnit: Num = None
    baseTimeNanoseconds: Num = None
    traceName: Num = None
    trace_id: Num = None
    vllm_version: Num = None
    sglang_version: Num = None
    cupti_version: Num = None
    cuda_runtime_version: Num = None
    cuda_driver_version: Num = None
    roctracer_version: Num = None
    hip_runtime_version: Num = None
    hip_driver_version: Num = None
    record_shapes: Num = None
    with_stack: Num = None
    with_flops: Num = None
    profile_memory: Num = None


class RawDoc(TopLevel, gc=False):
    """A trace object whose events are kept as raw JSON slices of the input (no objects built)."""

    traceEvents: list[msgspec.Raw] | None = None


RAW_DOC_DECODER = msgspec.json.Decoder(RawDoc)
RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
EVENTS_DECODER = msgspec.json.Decoder(list[Event])
EVENT_DECODER = msgspec.json.Decoder(Event)
