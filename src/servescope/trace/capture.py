"""What a CUDA/HIP-graph capture trace adds to the loaded events: the kernel each launch call recorded, and the model.

What it does: `launch_kernel_names(path)` reads the `args.kernel` name that launch calls carry (ROCm runtime
launches always; CUDA launches where the profiler records it) by correlation id — during stream capture nothing runs
on the GPU, so these names are the only link from a captured op to the kernels a replay runs; `model_hint(path)`
finds the model class the trace's Python stack names (`nn.Module: GptOssForCausalLM_0`, with_stack traces), so that
a capture and a replay of different models can be told apart.
What it does not do: load events (trace.load does), or match anything (analysis.capture does).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from servescope.trace._read import read_bytes

# the model class of a with_stack trace's module stack (vLLM and SGLang name the top module after the architecture)
_MODULE = re.compile(rb'"nn\.Module: ([A-Za-z0-9_]+?(?:ForCausalLM|ForConditionalGeneration|Model))_\d+"')
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "Runtime")


class _Args(msgspec.Struct, gc=False):
    correlation: int | float | str | None = None
    kernel: str | None = None


class _Event(msgspec.Struct, gc=False):
    cat: str | None = None
    args: _Args | None = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []  # noqa: N815 - the Kineto key


def launch_kernel_names(path: Path) -> dict[int, str]:
    """Kernel name by correlation id, from the launch calls that record one (`args.kernel`); {} when none does."""
    try:
        doc = msgspec.json.decode(read_bytes(path, []), type=_Doc)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return {}  # damaged or untyped beyond this reader: the loader's own warnings say why
    out = {}
    for e in doc.traceEvents:
        a = e.args
        if e.cat in _LAUNCH_CATS and a is not None and a.kernel and isinstance(a.correlation, int | float):
            out[int(a.correlation)] = a.kernel
    return out


def model_hint(path: Path) -> str | None:
    """The model class named by the trace's module stack (e.g. `GptOssForCausalLM`), None when it names none."""
    m = _MODULE.search(read_bytes(path, []))
    return m.group(1).decode("ascii", "replace") if m else None
