"""`-o` never names an input: the inputs a command was given (its path parameters, options marked InputOption)
and the check that refuses an output resolving to one of them (same path, same inode, or a file inside an input
folder), for every command (GuardedCommand in cli._app calls `refuse_input_as_output`). Every value that names an
existing file or folder is an input (`--routing FILE`, `verify --before TRACE`), so is a path after a `KIND:`
prefix (`--spec-method eagle3:HEAD.json`) and a sidecar read beside an input (`<result>.server.toml`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import click


class InputOption(click.Option):
    """An option whose value may name a file or folder the command reads although its type is not click.Path
    (`--model`: a bundled name or a config.json path). When it names an existing path, -o may not be it."""


def _is_output(param: click.Parameter) -> bool:
    return isinstance(param, click.Option) and bool({"-o", "--output"} & set(param.opts))


def _label(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name


def input_paths(ctx: click.Context) -> list[tuple[str, Path]]:
    """(label, path) for every path the invoked command was given to read: its click.Path parameters (arguments
    and options), InputOptions, and any other text value that names an existing folder (`trace --ray RANKS/`).
    Read from the command's declared parameters, so a command added later is covered without code of its own."""
    found: list[tuple[str, Path]] = []
    for param in ctx.command.params:
        if _is_output(param) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        values = value if isinstance(value, tuple | list) else (value,)
        for v in values:
            if not isinstance(v, str | os.PathLike) or not str(v):
                continue
            declared = isinstance(param.type, click.Path) or isinstance(param, InputOption)
            if declared or _exists(Path(v)):
                found.append((_label(param), Path(v)))
            if isinstance(v, str):  # `--spec-method eagle3:HEAD.json`, `--routing FILE`: a path inside a value
                found += [(_label(param), Path(part)) for part in _embedded(v) if _exists(Path(part))]
    return found + _sidecars(found)


def _embedded(value: str) -> list[str]:
    """The pieces of an option value after a `KIND:` or `KEY=` prefix (`eagle3:HEAD.json`, `draft:/m/config.json`)
    that may name files; the value itself is checked by the caller."""
    pieces = []
    for sep in (":", "="):
        head, _, tail = value.partition(sep)
        if tail and head:
            pieces.append(tail)
    return pieces


def _sidecars(found: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Files a command reads beside an input without being named: `<result>.server.toml` next to a benchmark file
    (validation.benchfile.sidecar_path), `hf_quant_config.json` next to a config.json."""
    out = []
    for label, path in found:
        for side in (path.with_name(path.name + ".server.toml"),
                     path.with_name(path.name.replace("config.json", "hf_quant_config.json"))):
            if side != path and _exists(side):
                out.append((f"{label} (beside {path.name})", side))
    return out


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _inside(out: Path, out_st: os.stat_result | None, folder: Path) -> bool:
    """`out` lies inside `folder` (links resolved) or, existing, is a hard link of a file directly inside it."""
    real_out, real_folder = os.path.realpath(out), os.path.realpath(folder)
    if os.path.commonpath([real_out, real_folder]) == real_folder:
        return True
    if out_st is None or not stat.S_ISREG(out_st.st_mode) or out_st.st_nlink < 2:
        return False
    try:
        with os.scandir(folder) as entries:
            return any((st := _stat(Path(e.path))) is not None and _same_file(st, out_st) for e in entries)
    except OSError:
        return False


def input_collision(out: Path, inputs: Sequence[tuple[str, Path]]) -> str | None:
    """Why writing `out` would overwrite one of `inputs` ("the same file as PATH", "inside the folder PATH"),
    or None. Same file: realpath, and st_dev + st_ino when both exist (symlinks and hard links). Devices, FIFOs
    and sockets are written in place, never replaced: they are no collision."""
    out_st = _stat(out)
    if out_st is not None and not stat.S_ISREG(out_st.st_mode) and not stat.S_ISDIR(out_st.st_mode):
        return None
    for label, path in inputs:
        in_st = _stat(path)
        if in_st is None:
            continue
        if stat.S_ISDIR(in_st.st_mode):
            if _inside(out, out_st, path):
                return f"inside the folder {label} {path}"
        elif stat.S_ISREG(in_st.st_mode) and (
                (out_st is not None and _same_file(out_st, in_st))
                or os.path.realpath(out) == os.path.realpath(path)):
            return f"the same file as {label}" if str(path) == str(out) else f"the same file as {label} {path}"
    return None


def refuse_input_as_output(ctx: click.Context) -> None:
    """Raise a one-line UsageError when the command's -o/--output names one of its inputs; nothing is written."""
    for param in ctx.command.params:
        if not _is_output(param) or param.name is None:
            continue
        out = ctx.params.get(param.name)
        if not isinstance(out, str | os.PathLike) or not str(out):
            continue
        why = input_collision(Path(out), input_paths(ctx))
        if why is not None:
            raise click.UsageError(f"-o {out} is an input of this command ({why}; servescope never modifies its "
                                   "inputs); choose another output")
