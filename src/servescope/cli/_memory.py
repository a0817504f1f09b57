"""The CLI's memory: the allocator setting for a big input, and `--max-memory`.

Does: on import, ask Polars' allocator to return freed pages at once when one input named on the command line holds
BIG_INPUT_BYTES or more once read (a gzip by its inflated size; a user's own _RJEM_MALLOC_CONF wins; library users are not touched); parse sizes with
units (`parse_size`) and set `--max-memory`'s budget in the environment for the command (`set_max_memory`).
Does not: measure memory (servescope._paths reads the budget) or handle errors (cli._app).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import click

__all__ = ["BIG_INPUT_BYTES", "FREE_AT_ONCE", "input_bytes", "largest_input_bytes", "parse_size", "set_max_memory"]

# Polars' allocator (jemalloc, read once when Polars loads: the CLI imports it later) keeps freed pages ~10 s by
# default. The trace loader frees every decoded chunk, so on big inputs those pages become most of the peak: the
# 1 GB trace peaks at 786 MB stock, 564 MB when freed pages go back at once (0.78x -> 0.56x the file; 550 MB:
# 531 -> 367 MB), for ~10 % more wall time (page faults) — which on a 68 MB file is the difference between ~10x
# and ~9x HTA's speed for 22 MB less. So: immediate return only when one input file holds >= BIG_INPUT_BYTES (one
# process loads one file at a time, rank folders included, so the largest file sets the peak; bench/RESULTS.md,
# "allocator"). A user's own setting wins; library users are not touched. 128 MiB, not 256: a 143 MB file of 1 M
# tiny kernels peaked at 562-606 MB for `trace --json` (3.9-4.2x) and 480-495 MB for `export` with the stock
# setting, 449 and 290 MB freeing at once (bench/RESULTS.md, "start fast (issue 30)"). 32 MiB, not 128: the pages
# held are ~0.5x the file (68 MB benchmark trace: 178 -> 144 MB, 9 runs alternated, CPU +3 %, wall within noise),
# on top of a ~120 MB floor (interpreter, Polars, NumPy), so they pass ~10 % of the peak at ~30 MB; the bundled
# example (0.8 MB) stays stock (bench/RESULTS.md, "issue 30: start-up and memory").
BIG_INPUT_BYTES = 32 << 20
FREE_AT_ONCE = "background_thread:false,dirty_decay_ms:0,muzzy_decay_ms:0"


def input_bytes(path: Path) -> int:
    """Bytes a file holds once read: its size, or for a gzip file under BIG_INPUT_BYTES its inflated size where
    larger (the trailer's ISIZE, the last member's size mod 2**32: a 9 MB gzip of 2 M tiny kernels inflates to
    286 MB and peaked at 2.6x that with the stock setting, 1.58x freeing at once; bench/RESULTS.md, "every input
    shape"). A multi-member or > 4 GiB gzip can be undercounted: it then keeps the stock setting."""
    size = path.stat().st_size
    if size >= BIG_INPUT_BYTES or size < 18:  # already big, or too short to be a gzip with a trailer
        return size
    with path.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return size
        fh.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(fh.read(4), "little"))


def largest_input_bytes(argv: Sequence[str]) -> int:
    """input_bytes of the largest file named on a command line or directly inside a folder named on it (or of the
    first found at BIG_INPUT_BYTES or more: that decides the setting); anything that is not a readable path counts
    0."""
    largest = 0
    for arg in argv:
        try:
            p = Path(arg)
            files = [p] if p.is_file() else [f for f in p.iterdir() if f.is_file()] if p.is_dir() else []
            for f in files:
                largest = max(largest, input_bytes(f))
                if largest >= BIG_INPUT_BYTES:  # the setting is decided: read no more
                    return largest
        except (OSError, ValueError):
            continue
    return largest


if "_RJEM_MALLOC_CONF" not in os.environ and largest_input_bytes(sys.argv[1:]) >= BIG_INPUT_BYTES:
    os.environ["_RJEM_MALLOC_CONF"] = FREE_AT_ONCE

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?)b?\s*", re.IGNORECASE)
_SI = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """Bytes of a size with units: 2GB, 1.5 GiB, 512mb, 800M, 123 (bytes); k/m/g/t are powers of 1000, ki/mi/gi/ti
    of 1024. Raises click.BadParameter for anything else or a size under one byte."""
    match = _SIZE.fullmatch(text or "")
    if match is None:
        raise click.BadParameter(f"expected a size such as 2GB or 512MiB, got {text!r}")
    number, prefix, binary = match.groups()
    scale = 1024 ** " kmgt".index(prefix.lower()) if binary and prefix else _SI[prefix.lower()]
    scaled = float(number) * scale  # a 400-digit number is inf here: refused below, never int(inf)
    size = int(scaled) if scaled < 2**63 else 0
    if size < 1 or (binary and not prefix):
        raise click.BadParameter(f"expected a size such as 2GB or 512MiB, got {text!r}")
    return size


def set_max_memory(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """`--max-memory`: the budget for this command, in the environment (worker processes inherit it;
    _paths.memory_override_bytes reads it), put back as it was when the command ends."""
    if value is None:
        return
    from servescope._paths import MAX_MEMORY_ENV

    size, before = parse_size(value), os.environ.get(MAX_MEMORY_ENV)
    os.environ[MAX_MEMORY_ENV] = str(size)
    ctx.call_on_close(lambda: _restore_env(MAX_MEMORY_ENV, before))


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
