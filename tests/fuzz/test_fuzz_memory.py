"""Memory proportional to what is kept (issue 21 part 2), at full size: a valid trace of 5 M tiny kernels (716 MB,
bench/make_many_kernels.py) through `trace --json` and `export -o .json.gz` peaks within 1.5x the file (GNU time's
peak RSS of a fresh process). ~1 minute and 0.7 GB of disk, so `make fuzz` only (FUZZ_SCALE > 1); the side-by-side
numbers against main are bench/bench_many_kernels.py's (bench/RESULTS.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench_scripts import bench_script

FUZZ = int(os.environ.get("FUZZ_SCALE", "1")) > 1
KERNELS = 5_000_000
RATIO = 1.5


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("many") / "many_kernels.json"
    with path.open("w") as fh:
        bench_script("make_many_kernels").write(fh, KERNELS)
    return path


def _peak_bytes(args: list[str]) -> int:
    """Peak RSS of `servescope ARGS` started as from a shell: without the _RJEM_MALLOC_CONF Polars puts into this
    process's environment when imported (the CLI then keeps its own allocator setting for big inputs: cli._app)."""
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    done = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "servescope", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-500:]
    return int(done.stderr.strip().splitlines()[-1]) * 1024


@pytest.mark.skipif(not FUZZ or shutil.which("/usr/bin/time") is None, reason="5 M kernels, ~1 min: make fuzz only")
@pytest.mark.parametrize("command", ["trace", "export"])
def test_five_million_tiny_kernels_within_one_and_a_half_times_the_file(many: Path, command: str,
                                                                          tmp_path: Path) -> None:
    args = ["trace", str(many), "--json"] if command == "trace" else ["export", str(many), "-o",
                                                                       str(tmp_path / "out.json.gz")]
    peak = _peak_bytes(args)
    assert peak <= RATIO * many.stat().st_size, f"{command}: peak {peak / 1e6:,.0f} MB for {many.stat().st_size / 1e6:,.0f} MB"
