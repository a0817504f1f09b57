"""Terminal report for `servescope trace` (Rich tables). Presentation only: shares are part/denominator of
numbers the analysis already holds, and each table names its denominator."""

from __future__ import annotations

import re

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servescope.analysis.analyze import TraceAnalysis
from servescope.analysis.breakdown import KindSummary, TraceBreakdown
from servescope.report.ranks_text import render_ranks
from servescope.units import GIGA, KILO, MEGA

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
_ARGS = re.compile(r"\(.*\)\s*$")


GENERIC_NAMES = {"Kernel", "Kernel2", "device_kernel", "kernel", "kernel_entry", "kentry"}


def _outside_templates(text: str) -> tuple[str, str]:
    """(text with template arguments removed, the first template argument list's content)."""
    depth, parens, kept, first, current = 0, 0, [], "", []
    for ch in text:
        parens += (ch == "(") - (ch == ")")
        if parens > 0 and depth > 0:  # `(8)>(0)` inside template arguments is a comparison, not a bracket
            current.append(ch)
            continue
        if ch == "<":
            depth += 1
            if depth == 1:
                current = []
                continue
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0 and not first:
                first = "".join(current)
            if depth == 0:
                continue
        if depth == 0:
            kept.append(ch)
        else:
            current.append(ch)
    return "".join(kept), first


def short_name(name: str, width: int = 48) -> str:
    """A kernel name a person can read in a table: no `void`, template arguments, parameter list or namespaces.
    A generic wrapper (`cutlass::Kernel2<…>`, `cutlass::device_kernel<flash::FlashAttnFwdSm90<…>>`) shows the
    kernel it wraps instead."""
    if name.startswith(("Memcpy", "Memset")):
        return name.split(" (")[0]
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    outer, first_arg = _outside_templates(text)
    # `std::enable_if<…>::type vllm::fused_add_rms_norm_kernel<…>(…)`: the name is the last word.
    words = _ARGS.sub("", outer).split()
    short = words[-1].split("::")[-1] if words else name
    while (short in GENERIC_NAMES or short.startswith("enable_")) and first_arg:
        inner, first_arg = _outside_templates(first_arg)
        short = inner.split(",")[0].strip().split("::")[-1] or short
    return short if len(short) <= width else short[: width - 1] + "…"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "–"


def _classes_table(k: KindSummary) -> Table:
    t = Table(title=f"{k.kind}: time per class", title_justify="left")
    t.add_column("class")
    t.add_column("union ms", justify="right")
    t.add_column("% of GPU busy", justify="right")
    for cls, us in sorted(k.classes_us.items(), key=lambda kv: -kv[1]):
        t.add_row(cls, f"{us / 1e3:.3f}", _pct(us, k.gpu_busy_us))
    return t


def _collectives_table(k: KindSummary) -> Table | None:
    if not k.collectives:
        return None
    t = Table(title=f"{k.kind}: collectives (communication exposed: {_pct(k.comm_exposed_us, k.gpu_busy_us)} of "
                    "GPU busy)", title_justify="left")
    for col in ("collective", "calls/step", "calls/token", "median µs", "p90 µs", "total ms", "% of GPU busy",
                "median msg", "algbw GB/s", "busbw GB/s"):
        t.add_column(col, justify="left" if col == "collective" else "right", no_wrap=col == "collective")
    for name, s in k.collectives.items():
        per_token = k.calls_per_token(name)
        t.add_row(name, f"{k.calls_per_step(name):.1f}", "–" if per_token is None else f"{per_token:.1f}",
                  f"{s.median_us:.1f}", f"{s.p90_us:.1f}", f"{s.total_us / 1e3:.3f}", _pct(s.total_us, k.gpu_busy_us),
                  _bytes(s.message_bytes_median), _gb_per_s(s.algbw_bytes_per_s), _gb_per_s(s.busbw_bytes_per_s))
    return t


def _bytes(n_bytes: float | None) -> str:
    """Decimal units (kB = 1e3 B, MB = 1e6 B), as nccl-tests sizes are usually read."""
    if n_bytes is None:
        return "–"
    for unit, scale in (("GB", GIGA), ("MB", MEGA), ("kB", KILO)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def _gb_per_s(bytes_per_s: float | None) -> str:
    return "–" if bytes_per_s is None else f"{bytes_per_s / GIGA:.1f}"


def _kernels_table(k: KindSummary, num_sms: int | None) -> Table:
    t = Table(title=f"{k.kind}: top kernels (share = summed kernel time / GPU busy)", title_justify="left")
    for col in ("kernel", "class", "calls", "median µs", "total ms", "share", "blocks/SM"):
        t.add_column(col, justify="left" if col in ("kernel", "class") else "right", no_wrap=True)
    for kern in k.top_kernels:
        bps = "–" if kern.blocks_per_sm is None else f"{kern.blocks_per_sm:.2f}"
        t.add_row(escape(short_name(kern.name)), kern.kernel_class, str(kern.calls), f"{kern.median_us:.1f}",
                  f"{kern.total_us / 1e3:.3f}", _pct(kern.total_us, k.gpu_busy_us), bps)
    return t


def _steps_table(b: TraceBreakdown, limit: int = 20) -> Table:
    t = Table(title=f"steps ({b.method})", title_justify="left")
    for col in ("#", "kind", "batch", "tokens", "GPU busy ms", "span ms", "comm % busy", "label"):
        t.add_column(col, justify="left" if col in ("kind", "label") else "right", no_wrap=True)
    for s in b.steps[:limit]:
        t.add_row(str(s.index), s.kind, str(s.batch_size or "–"), str(s.tokens or "–"),
                  f"{s.gpu_busy_us / 1e3:.3f}", f"{s.gpu_span_us / 1e3:.3f}",
                  _pct(s.classes_us.get("communication", 0.0), s.gpu_busy_us), escape(s.label[:48]))
    if len(b.steps) > limit:
        t.caption = f"… {len(b.steps) - limit} more steps (see --json)"
    return t


def _rank_renderables(b: TraceBreakdown) -> list:
    head = Text(f"rank {b.rank if b.rank is not None else '?'} · {b.file} · {b.device_name or 'GPU ?'}"
                f"{f' ({b.num_sms} SMs)' if b.num_sms else ''}", style="bold")
    out: list = [head, _steps_table(b)]
    for k in b.kinds:
        out.append(Text(f"\n{k.kind}: {k.steps} step(s), GPU busy {k.gpu_busy_us / 1e3:.2f} ms of span "
                        f"{k.gpu_span_us / 1e3:.2f} ms (idle {_pct(k.idle_us, k.gpu_span_us)} of span)", style="bold"))
        out += [x for x in (_classes_table(k), _collectives_table(k), _kernels_table(k, b.num_sms)) if x is not None]
    return out


def render_trace(a: TraceAnalysis, console: Console, per_rank: bool = False) -> None:
    """The full report per rank; for a rank folder, the compact cross-rank view unless `per_rank`."""
    if a.cross_rank is not None and not per_rank:
        render_ranks(a.cross_rank, a.findings, a.warnings, console)
        return
    for b in a.ranks:
        console.print(Group(*_rank_renderables(b)))
    console.print(Text("findings", style="bold underline"))
    for f in a.findings:
        where = f"[rank {f.rank}] " if f.rank is not None and len(a.ranks) > 1 else ""
        console.print(Text(f"  {f.severity:<6} {where}{f.code}: {f.message}", style=SEVERITY_STYLE[f.severity]), highlight=False)
    for w in a.warnings:
        console.print(Text(f"warning: {w}", style="yellow"), highlight=False)
