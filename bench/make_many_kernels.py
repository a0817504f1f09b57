"""Write a valid Kineto trace of N tiny kernels (default 5 M: 716 MB of JSON), deterministically, for memory benches.

What it does: streams `{"traceEvents": [...]}` to OUT (plain JSON, or gzip when OUT ends in .gz) without holding
it: every kernel is one `cat: kernel` complete event of ~143 bytes (no grid/block args) on GPU pid 0, one of 4
streams, named after one of 16 short real kernel names (GEMMs, attention, norms, elementwise, NCCL, a memcpy
kernel), 1–20 µs long (plus a ns per name, so that no two names tie on total time) and 2 µs apart, with its
correlation id. Every 4,096 kernels form one vLLM decode step: a `user_annotation` step label and one
`cudaGraphLaunch` whose correlation all the step's kernels carry (a CUDA graph replay, as vLLM decodes), so steps
and classes are found as in a real capture. `--distinct-names`: every kernel's name is its own
(`triton_poi_fused_add_<i>`, as Triton names a fused kernel; the bad case for string columns: no name repeats), 1–20 µs
plus i mod 1000 ns. The same N (and flag) always writes the same bytes.
What it does not do: mimic a real event mix (it is the issue-21 stress case: millions of tiny events).

    python bench/make_many_kernels.py [OUT] [--kernels 5000000] [--distinct-names]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import IO

DEFAULT_OUT = Path(__file__).parent / "out" / "many_kernels.json"
NAMES = (  # short real kernel names (tiny kernels: the name is most of an event's bytes in a real trace)
    "gemv2T_kernel",
    "flash_fwd_kernel",
    "rms_norm_kernel",
    "act_and_mul_kernel",
    "triton_poi_fused_add_0",
    "triton_red_fused_sum_1",
    "ncclKernel_AllReduce",
    "Memcpy DtoD",
    "rotary_embedding_kernel",
    "reshape_and_cache_kernel",
    "reduce_kernel",
    "sm90_xmma_gemm_bf16",
    "elementwise_kernel",
    "index_elementwise_kernel",
    "topk_kernel",
    "softmax_warp_forward",
)
STEP_KERNELS = 4096  # kernels per step (one CUDA graph replay)
T0_US = 1.7e15  # epoch µs (2023), as Kineto writes
LABEL = "execute_context_0(0)_generation_64(64)"  # vLLM's step annotation: a decode step of 64 sequences


def _kernel(i: int, ts: float, correlation: int, distinct: bool = False) -> str:
    if distinct:  # every name its own: the ns part varies with i so few kernels tie
        text, dur = f'"triton_poi_fused_add_{i}"', 1 + (i * 7919) % 20 + (i % 1000) / 1000
    else:
        name = (i * 31) % len(NAMES)
        dur = 1 + (i * 7919) % 20 + name / 1000  # + ns per name: no two names tie on total time (no tie in top kernels)
        text = json.dumps(NAMES[name])
    return (f'{{"ph":"X","cat":"kernel","name":{text},"pid":0,"tid":{7 + i % 4},'
            f'"ts":{ts:.0f},"dur":{dur:.3f},"args":{{"correlation":{correlation},"stream":{7 + i % 4}}}}}')


def _step(ts: float, span: float, correlation: int) -> str:
    """A step's annotation and its cudaGraphLaunch (whose correlation every kernel of the replay carries)."""
    return (f'{{"ph":"X","cat":"user_annotation","name":"{LABEL}","pid":100,"tid":100,"ts":{ts - 1:.0f},'
            f'"dur":{span + 1:.0f}}},{{"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":100,"tid":100,'
            f'"ts":{ts - 0.5:.1f},"dur":0.2,"args":{{"correlation":{correlation}}}}}')


def write(fh: IO[str], n_kernels: int, distinct: bool = False) -> int:
    """Write the document to `fh`; returns the number of events written."""
    fh.write('{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"NVIDIA H100 80GB HBM3","numSms":132,'
             '"maxThreadsPerMultiprocessor":2048}],"traceEvents":[')
    n = 0
    batch: list[str] = []
    for i in range(n_kernels):
        ts = T0_US + 2.0 * i
        step = i // STEP_KERNELS
        if i % STEP_KERNELS == 0:
            batch.append(_step(ts, 2.0 * min(STEP_KERNELS, n_kernels - i), step + 1))
            n += 2
        batch.append(_kernel(i, ts, step + 1, distinct))
        n += 1
        if len(batch) >= 8192:
            fh.write(",".join(batch) + ",")
            batch.clear()
    fh.write(",".join(batch))
    fh.write("]}")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--kernels", type=int, default=5_000_000)
    ap.add_argument("--distinct-names", action="store_true", help="every kernel a different name")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.out.suffix == ".gz":
        with gzip.open(a.out, "wt", compresslevel=6) as fh:
            n = write(fh, a.kernels, a.distinct_names)
    else:
        with a.out.open("w") as fh:
            n = write(fh, a.kernels, a.distinct_names)
    print(json.dumps({"path": str(a.out), "size_mb": round(a.out.stat().st_size / 1e6, 1), "events": n}))


if __name__ == "__main__":
    main()
