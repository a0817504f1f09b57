"""The CLI returns Polars' freed pages at once only for big input files (cli/_app.py: ~10 % more wall time buys 0.56x
instead of 0.78x the file in peak RSS on a 1 GB trace); small inputs keep jemalloc's default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servescope.cli._memory import BIG_INPUT_BYTES, FREE_AT_ONCE, largest_input_bytes


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as fh:  # a sparse file: the size without the disk
        fh.truncate(size)
    return path


def test_largest_input_is_a_file_or_a_file_in_a_folder(tmp_path: Path) -> None:
    a = _sparse(tmp_path / "a.json", 1000)
    folder = tmp_path / "ranks"
    folder.mkdir()
    _sparse(folder / "r0.json", 3000)
    _sparse(folder / "r1.json", 2000)
    (folder / "nested").mkdir()
    _sparse(folder / "nested" / "deep.json", 10_000)  # not looked at: one level only
    assert largest_input_bytes([str(a), "--json", "not/a/path", "\x00bad"]) == 1000
    assert largest_input_bytes([str(a), str(folder)]) == 3000


def _conf_in_child(args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    code = ("import sys, os; sys.argv = ['servescope', *sys.argv[1:]]; import servescope.cli._app; "
            "print(os.environ.get('_RJEM_MALLOC_CONF', ''))")
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_allocator_setting_only_for_big_inputs(tmp_path: Path) -> None:
    small = _sparse(tmp_path / "small.json", 1 << 20)
    big = _sparse(tmp_path / "big.json", BIG_INPUT_BYTES)
    assert _conf_in_child(["trace", str(small), "--json"]) == ""
    assert _conf_in_child(["trace", str(big), "--json"]) == FREE_AT_ONCE
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i in range(4):  # together over the threshold, each file under it: each process holds one file at a time
        _sparse(ranks / f"rank{i}.json", BIG_INPUT_BYTES // 3)
    assert _conf_in_child(["trace", str(ranks), "--json"]) == ""
    env_conf = subprocess.run(
        [sys.executable, "-c", "import os, sys; sys.argv=['s', sys.argv[1]]; import servescope.cli._app; "
         "print(os.environ['_RJEM_MALLOC_CONF'])", str(big)],
        env={**os.environ, "_RJEM_MALLOC_CONF": "narenas:1"}, capture_output=True, text=True, check=True)
    assert env_conf.stdout.strip() == "narenas:1"  # the user's own setting wins


def test_a_gzip_counts_its_inflated_size(tmp_path: Path) -> None:
    """A small gzip that inflates past BIG_INPUT_BYTES sets the free-at-once allocator (its trailer's ISIZE); the
    same bytes under BIG_INPUT_BYTES, a gzip that stays small, and a file that only looks like one do not."""
    import gzip

    big = tmp_path / "big.json.gz"
    with gzip.open(big, "wb", compresslevel=1) as fh:  # ~40 MiB of zeros: a few tens of KB on disk
        for _ in range(40):
            fh.write(b"\0" * (1 << 20))
    assert big.stat().st_size < BIG_INPUT_BYTES
    assert largest_input_bytes([str(big)]) == 40 << 20
    assert _conf_in_child(["trace", str(big)]) == FREE_AT_ONCE
    small = tmp_path / "small.json.gz"
    small.write_bytes(gzip.compress(b"{}" * 1000))
    assert largest_input_bytes([str(small)]) == max(2000, small.stat().st_size)
    assert _conf_in_child(["trace", str(small)]) == ""
    fake = tmp_path / "fake.json"
    fake.write_bytes(b"\x1f\x8b" + b"x" * 100 + (1 << 30).to_bytes(4, "little"))  # gzip magic, no real gzip
    assert largest_input_bytes([str(fake)]) == 1 << 30  # read as its trailer says: the setting only, no harm
