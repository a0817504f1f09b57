"""Terminal report for `servescope trace` (Rich tables). Presentation only: shares are part/denominator of
numbers the analysis already holds, and each table names its denominator. Kernel names are shortened by
report.kernel_names (its `cut`, `short_name`, `short_names` re-exported here)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servescope.analysis.analyze import TraceAnalysis
from servescope.analysis.breakdown import KindSummary, TraceBreakdown
from servescope.analysis.roofline import SHAPE_STATUS_TEXT, Peaks, Roofline, roofline
from servescope.report.kernel_names import cut, short_name, short_names
from servescope.report.trace_json import rank_peaks
from servescope.units import GIGA, KILO, MEGA

# the kernel-name shortening is report.kernel_names', re-exported
__all__ = ["SEVERITY_STYLE", "UNNAMED_GPU", "cut", "render_trace", "short_name", "short_names", "trace_gpu"]

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
UNNAMED_GPU = "GPU not named in the trace"


def trace_gpu(name: str | None, num_sms: int | None = None) -> str:
    """The GPU a trace ran on as a header says it: the trace's own name for it (deviceProperties, Nsight's
    TARGET_INFO tables), else that the trace does not name it; ` (N SMs)` when the count is known."""
    sms = f" ({num_sms} SMs)" if num_sms else ""
    return f"{name or UNNAMED_GPU}{sms}"


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
    labels = short_names(kern.name for kern in k.top_kernels)
    for kern in k.top_kernels:
        bps = "–" if kern.blocks_per_sm is None else f"{kern.blocks_per_sm:.2f}"
        t.add_row(escape(labels[kern.name]), kern.kernel_class, str(kern.calls), f"{kern.median_us:.1f}",
                  f"{kern.total_us / 1e3:.3f}", _pct(kern.total_us, k.gpu_busy_us), bps)
    return t


def _opt(x: float | None, fmt: str, scale: float = 1.0) -> str:
    return "–" if x is None else format(x * scale, fmt)


def _per_call(r: Roofline, calls: int) -> str:
    """µs per shaped call, and the measured reference's µs per call in brackets where there is one."""
    n = max(calls, 1)
    ref = f" ({r.achievable_us / n:,.1f})" if r.achievable_us is not None else ""
    return f"{r.dur_us / n:,.1f}{ref}"


def _roofline_table(k: KindSummary, peaks: Peaks | None) -> Table | None:
    """The top kernels that carry a shape: achieved rates, intensity, bound, % of peak and of the measured
    achievable, waves and tail efficiency (analysis/roofline.py; docs/metrics.md). None when none has a shape."""
    rows = [(kern, r) for kern in k.top_kernels if kern.work and (r := roofline(kern.work, peaks)) is not None]
    if not rows:
        return None
    t = Table(title=f"{k.kind}: roofline of the top kernels with shapes (work from the launching op's Input Dims)",
              title_justify="left")
    for col in ("kernel", "model", "shaped", "TFLOP/s", "TB/s", "FLOP/B", "bound", "% peak", "% achievable",
                "µs/call (achievable)", "waves", "tail"):
        t.add_column(col, justify="left" if col in ("kernel", "model", "bound") else "right", no_wrap=True)
    labels = short_names(kern.name for kern, _ in rows)
    for kern, r in rows:
        models = sorted({f"{g.model} {g.dtype}" if g.dtype else g.model for g in kern.work})
        t.add_row(escape(labels[kern.name]), ", ".join(models), f"{kern.shaped_calls}/{kern.calls}",
                  _opt(r.achieved_flops_per_s if r.flops > 0 else None, ".1f", 1e-12), _opt(r.achieved_bytes_per_s, ".2f", 1e-12),
                  _opt(r.intensity_flops_per_byte if r.flops > 0 else None, ".1f"), r.bound or "–", _opt(r.frac_of_peak, ".1f", 100),
                  _opt(r.frac_of_achievable, ".1f", 100), _per_call(r, kern.shaped_calls),
                  _opt(kern.waves, ".2f"), _opt(kern.tail_efficiency, ".2f"))
    return t


def _shape_line(k: KindSummary) -> Text | None:
    """How much GPU time has a shape, and why the rest has none (summed kernel time)."""
    shaped = sum(g.dur_us for g in k.work)
    unshaped = sum(k.unshaped_us.values())
    if shaped + unshaped <= 0:
        return None
    why = ", ".join(f"{SHAPE_STATUS_TEXT.get(r, r)} {us / 1e3:.3f} ms" for r, us in
                    sorted(k.unshaped_us.items(), key=lambda kv: -kv[1]))
    if not shaped:
        return Text(f"no kernel carries a shape: {unshaped / 1e3:.3f} ms of summed GPU time without one ({why})",
                    style="dim")
    return Text(f"shapes: {shaped / 1e3:.3f} ms of {(shaped + unshaped) / 1e3:.3f} ms summed GPU time carry one; "
                f"without: {why}" if why else "shapes: all GPU time carries one", style="dim")


def _steps_table(b: TraceBreakdown, limit: int = 20) -> Table:
    t = Table(title=f"steps ({b.method})", title_justify="left")
    for col in ("#", "kind", "batch", "tokens", "GPU busy ms", "span ms", "comm % busy", "label"):
        t.add_column(col, justify="left" if col in ("kind", "label") else "right", no_wrap=True)
    for s in b.steps[:limit]:
        t.add_row(str(s.index), s.kind, str(s.batch_size or "–"), str(s.tokens or "–"),
                  f"{s.gpu_busy_us / 1e3:.3f}", f"{s.gpu_span_us / 1e3:.3f}",
                  _pct(s.classes_us.get("communication", 0.0), s.gpu_busy_us), escape(cut(s.label, 48)))
    if len(b.steps) > limit:
        t.caption = f"… {len(b.steps) - limit} more steps (see --json)"
    return t


def _idle(k: KindSummary) -> str:
    inside = (f"; {_pct(k.graph_idle_us, k.gpu_span_us)} of span inside graph replays"
              if k.graph_idle_us > 0 else "")
    return f"idle {_pct(k.idle_us, k.gpu_span_us)} of span{inside}"


def _rank_renderables(b: TraceBreakdown, resolved: tuple[Peaks | None, tuple[str, ...]]) -> list:
    head = Text(f"rank {b.rank if b.rank is not None else '?'} · {b.file} · {trace_gpu(b.device_name, b.num_sms)}",
                style="bold")
    out: list = [head, _steps_table(b)]
    peaks, notes = resolved
    for k in b.kinds:
        out.append(Text(f"\n{k.kind}: {k.steps} step(s), GPU busy {k.gpu_busy_us / 1e3:.2f} ms of span "
                        f"{k.gpu_span_us / 1e3:.2f} ms ({_idle(k)})", style="bold"))
        out += [x for x in (_classes_table(k), _collectives_table(k), _kernels_table(k, b.num_sms)) if x is not None]
        table = _roofline_table(k, peaks)
        if table is not None:
            table.caption = "; ".join(notes)
            out.append(table)
        line = _shape_line(k)
        if line is not None:
            out.append(line)
    return out


def render_trace(a: TraceAnalysis, console: Console, per_rank: bool = False) -> None:
    """The full report per rank; for a rank folder, the compact cross-rank view unless `per_rank`."""
    if a.cross_rank is not None and not per_rank:
        from servescope.report.ranks_text import render_ranks  # rank folders only

        render_ranks(a.cross_rank, a.findings, a.warnings, console)
        return
    for i, b in enumerate(a.ranks):
        console.print(Group(*_rank_renderables(b, rank_peaks(a, i))))
    console.print(Text("findings", style="bold underline"))
    for f in a.findings:
        where = f"[rank {f.rank}] " if f.rank is not None and len(a.ranks) > 1 else ""
        console.print(Text(f"  {f.severity:<6} {where}{f.code}: {f.message}", style=SEVERITY_STYLE[f.severity]), highlight=False)
    for w in a.warnings:
        console.print(Text(f"warning: {w}", style="yellow"), highlight=False)
