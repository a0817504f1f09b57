"""The console process's settings (`servescope`, `python -m servescope`: cli._app.run): what a short-lived command
should not pay for, set before the command imports its libraries. Library and test callers (`main`) keep Python's.
"""

from __future__ import annotations

import gc
import os
import sys

# CPython's cyclic GC runs a pass every 700 container allocations (gen 0) and a full pass after 10 x 10 of them. A
# command's imports (Polars, NumPy, Rich: ~10^5 objects) and its analysis trigger ~150 passes, ~14 of them over the
# older generations, which rescan every imported module's objects: 40-110 ms of `servescope trace` on the bundled
# example or the 68 MB trace, ~20-30 ms of `simulate` (bench/RESULTS.md, issue 30). The thresholds below are mypy's
# for the same reason (mypy/build.py: "run gc less frequently, as otherwise we can spend a large fraction of cpu in
# gc"): a pass every 200,000 allocations. Garbage without cycles is freed at once by reference counting, as before;
# only cycles wait longer, and a command ends in seconds (exit_now frees everything at once).
GC_THRESHOLDS = (200_000, 30, 30)


def fewer_gc_passes() -> None:
    """The console process's cyclic-GC thresholds (GC_THRESHOLDS); library callers keep Python's."""
    if sys.implementation.name == "cpython":
        gc.set_threshold(*GC_THRESHOLDS)


# NumPy's OpenBLAS starts a pool of one thread per core at import and its idle threads spin waiting for work: ~20 ms
# of CPU at `import numpy` and ~30 ms of `simulate` (bench/RESULTS.md, issue 30), on a 2-core machine taken from the
# command's own thread. servescope's BLAS calls are least squares and solves of a few parameters, below OpenBLAS's
# threading sizes; `validate --cv`, plan, model, sweep, simulate and trace print the same bytes either way. The
# variables are OpenBLAS's (its README, "Set the number of threads with environment variables"); one the user
# set is kept.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread() -> None:
    """The console process's OpenBLAS runs on the calling thread (BLAS_THREAD_VARIABLES), unless the user set a
    thread count or NumPy is already loaded (the pool exists); library callers keep theirs."""
    if "numpy" not in sys.modules and not any(v in os.environ for v in BLAS_THREAD_VARIABLES):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
