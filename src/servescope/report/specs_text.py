"""Terminal view of `servescope specs show`: one GPU or model spec, numbers in engineering units, and the full
citation of every source key it cites. Presentation only: values come from the frozen spec, citations from
servescope.specs.sources.

Units: rates and FLOP/s with decimal prefixes (1.597 TB/s, 467.8 TFLOP/s; one prefix for a dict's entries so
they compare), sizes in binary units with the decimal size beside (95.59 GiB = 102.6 GB, 128 MiB), parameter
counts in B / M, watts; never an exponent. At most 4 significant digits: the data carry no more.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servescope.specs.hardware import GpuSpec
from servescope.specs.models import ModelSpec
from servescope.specs.sources import Citation, citations

_DECIMAL = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))
_COUNTS = ((1e9, "B"), (1e6, "M"), (1e3, "k"))
_RATES = (("_bytes_per_s", "B/s"), ("_flops_per_s", "FLOP/s"))
VALUE_WIDTH = 44  # values wrap here (less on a narrow terminal), so the sources (the long column) get the rest


def plain(x: float) -> str:
    """x with at most 4 significant digits, thousands separated, no exponent, no trailing zeros."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(x))))
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _prefix(x: float, scales: Iterable[tuple[float, str]]) -> tuple[float, str]:
    return next(((s, p) for s, p in scales if abs(x) >= s), (1.0, ""))


def rate(values: Iterable[float], unit: str) -> tuple[list[str], str]:
    """Rates with one decimal prefix, chosen by the smallest non-zero one (so 1,871 TFLOP/s beside 467.8)."""
    vals = list(values)
    nonzero = [abs(v) for v in vals if v]
    scale, p = _prefix(min(nonzero), _DECIMAL) if nonzero else (1e9 if unit == "B/s" else 1e12, "")
    if not nonzero:
        p = "G" if unit == "B/s" else "T"
    return [plain(v / scale) for v in vals], f"{p}{unit}"


def size(n_bytes: float) -> str:
    """A size in binary units, with the decimal size beside from 1 GiB up (95.59 GiB = 102.6 GB)."""
    scale, unit = _prefix(n_bytes, _BINARY)
    text = f"{plain(n_bytes / scale)} {unit or 'B'}"
    if n_bytes >= 2.0**30:
        d, p = _prefix(n_bytes, _DECIMAL)
        text += f" = {plain(n_bytes / d)} {p}B"
    return text


def count(n: float) -> str:
    """A count such as a parameter count: 6.169 B, 44.04 M."""
    scale, unit = _prefix(n, _COUNTS)
    return f"{plain(n / scale)} {unit}".rstrip()


def _runs(items: Iterable[Any]) -> str:
    """A sequence with repeats folded: dense, moe ×60."""
    out: list[tuple[str, int]] = []
    for x in items:
        s = str(x)
        if out and out[-1][0] == s:
            out[-1] = (s, out[-1][1] + 1)
        else:
            out.append((s, 1))
    return ", ".join(s if n == 1 else f"{s} ×{n}" for s, n in out) or "–"


def value_text(field: str, value: Any) -> str:
    """One field's value as `specs show` prints it (module docstring)."""
    if value is None:
        return "–"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, dict):
        return _mapping(field, value)
    if isinstance(value, tuple | list):
        return _runs(value)
    if not isinstance(value, int | float):
        return str(value)
    for suffix, unit in _RATES:
        if field.endswith(suffix) or field == suffix[1:]:
            [text], u = rate([value], unit)
            return f"{text} {u}"
    if field.endswith("_bytes"):
        return size(value)
    if field.endswith("_w"):
        return f"{plain(value)} W"
    return plain(value)


def _mapping(field: str, value: dict[str, Any]) -> str:
    nums = {k: v for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    for suffix, unit in _RATES:
        if (field.endswith(suffix) or field == suffix[1:]) and len(nums) == len(value):
            texts, u = rate(nums.values(), unit)
            return "\n".join(f"{k} {t} {u}" for k, t in zip(nums, texts, strict=True))
    if field == "params" and len(nums) == len(value):
        return "\n".join(f"{k} {count(v)}" for k, v in nums.items())
    lines = []
    for k, v in value.items():
        inner = ", ".join(f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else value_text(k, v)
        lines.append(f"{k}: {inner}")
    return "\n".join(lines) or "–"


def _source(sources: dict[str, str], field_name: str) -> str:
    """Sources are keyed by the quantity (`hbm_bw`, `flops.fp8`), fields by quantity + unit (`hbm_bw_bytes_per_s`)."""
    stem = field_name
    for suffix in ("_flops_per_s", "_bytes_per_s", "_per_s", "_bytes", "_gpus", "_w"):
        stem = stem.removesuffix(suffix)
    if stem == "flops":
        return "\n".join(f"{k.split('.', 1)[1]}: {v}" for k, v in sources.items() if k.startswith("flops."))
    return sources.get(field_name) or sources.get(stem, "")


def spec_sources(spec: GpuSpec | ModelSpec) -> dict[str, str]:
    """What each field or quantity of the spec is sourced from (a model: its config file)."""
    return dict(spec.sources) if isinstance(spec, GpuSpec) else {"config": spec.source}


def spec_citations(spec: GpuSpec | ModelSpec) -> tuple[Citation, ...]:
    """Every source key, word and issue the spec's sources cite, resolved."""
    return citations(spec_sources(spec).values())


def render_spec(spec: GpuSpec | ModelSpec, console: Console) -> None:
    """Every field of a GpuSpec or ModelSpec with its source, then the citation of each key the sources cite."""
    sources = spec_sources(spec)
    title = spec.name + (f" ({spec.display_name})" if isinstance(spec, GpuSpec) and spec.display_name else "")
    per_field = isinstance(spec, GpuSpec)  # a model has one source, its config (a row of its own)
    names = [f.name for f in dataclasses.fields(spec) if f.name not in ("sources", "name")]
    spare = console.width - max(map(len, names)) - 6  # the field column and the cells' padding
    wrap = min(VALUE_WIDTH, max(20, spare // 2)) if per_field else max(20, spare)
    t = Table(title=title, title_justify="left")
    t.add_column("field", no_wrap=True)
    t.add_column("value", overflow="fold")
    if per_field:
        t.add_column("source", overflow="fold", style="dim")
    for f in dataclasses.fields(spec):
        if f.name in ("sources", "name"):
            continue
        value = getattr(spec, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        text = "\n".join(textwrap.fill(line, wrap, subsequent_indent="  ")
                         for line in value_text(f.name, value).splitlines())
        t.add_row(f.name, escape(text), *([escape(_source(sources, f.name))] if per_field else []))
    console.print(t)
    cited = spec_citations(spec)
    if cited:
        c = Table(title="sources cited", title_justify="left", box=None, show_header=False, pad_edge=False)
        c.add_column("key", no_wrap=True)
        c.add_column("citation", overflow="fold")
        for x in cited:
            c.add_row(escape(x.key), escape(x.text))
        console.print(c)
