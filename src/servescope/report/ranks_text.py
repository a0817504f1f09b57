"""Terminal view of a rank folder (Rich tables): the compact cross-rank comparison shown instead of one full
report per rank. Presentation only: every number comes from `servescope.analysis.ranks.CrossRankView`; shares name their
denominator. Findings that several ranks share are printed once with the ranks they hold on.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servescope.analysis.findings import Finding
from servescope.analysis.ranks import CrossRankView

MAX_STEP_ROWS = 20
MAX_RANK_ROWS = 32  # a folder of a thousand ranks: the table shows the ones that matter
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "–"


def _rank(r: int | None) -> str:
    return "?" if r is None else str(r)


def _shown(v: CrossRankView, limit: int) -> list[int]:
    """Indexes of the ranks to show: all, or the `limit` slowest on most common steps (ties: the most GPU span),
    in rank order."""
    if len(v.ranks) <= limit:
        return list(range(len(v.ranks)))
    slowest = v.slowest_rank_counts
    order = sorted(range(len(v.ranks)), key=lambda i: (-slowest.get(v.ranks[i].rank, 0), -v.ranks[i].gpu_span_us))
    return sorted(order[:limit])


def ranks_table(v: CrossRankView, limit: int = MAX_RANK_ROWS) -> Table:
    t = Table(title=f"{len(v.ranks)} ranks: GPU busy per rank (all steps)", title_justify="left")
    for col in ("rank", "device", "steps", "GPU busy ms", "span ms", "busy % of span", "comm ms",
                "comm % of busy", "slowest on"):
        t.add_column(col, justify="left" if col == "device" else "right", no_wrap=True)
    slowest = v.slowest_rank_counts
    shown = _shown(v, limit)
    if len(shown) < len(v.ranks):
        t.caption = (f"{len(shown)} of {len(v.ranks)} ranks shown: the slowest on the most common steps "
                     "(all: --json)")
    for r in (v.ranks[i] for i in shown):
        t.add_row(_rank(r.rank), escape(r.device_name or "not named"), str(r.steps), _ms(r.gpu_busy_us), _ms(r.gpu_span_us),
                  _pct(r.gpu_busy_us, r.gpu_span_us), _ms(r.comm_us), _pct(r.comm_us, r.gpu_busy_us),
                  f"{slowest.get(r.rank, 0)}/{v.steps_compared} steps")
    return t


def steps_table(v: CrossRankView, limit: int = MAX_STEP_ROWS) -> Table:
    t = Table(title=f"step time (GPU span) across ranks, {v.steps_compared} common step(s)", title_justify="left")
    for col in ("#", "kind", "min ms", "median ms", "max ms", "spread ms", "spread % of max", "slowest rank"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for s in v.steps[:limit]:
        t.add_row(str(s.index), s.kind, _ms(s.min_us), _ms(s.median_us), _ms(s.max_us), _ms(s.spread_us),
                  _pct(s.spread_us, s.max_us), _rank(s.slowest_rank))
    if len(v.steps) > limit:
        t.caption = f"… {len(v.steps) - limit} more steps (see --json)"
    return t


def collectives_table(v: CrossRankView) -> Table | None:
    if not v.collectives:
        return None
    t = Table(title="collective wait skew over the common steps (the rank with the most time waited most)",
              title_justify="left")
    for col in ("collective", "min ms", "rank", "max ms", "rank", "skew ms", "skew % of max"):
        t.add_column(col, justify="left" if col == "collective" else "right", no_wrap=True)
    for c in v.collectives:
        hi = max(c.per_rank_us)
        t.add_row(c.collective, _ms(min(c.per_rank_us)), _rank(c.min_rank), _ms(hi), _rank(c.max_rank),
                  _ms(c.skew_us), _pct(c.skew_us, hi))
    return t


def _rank_list(ranks: Sequence[int | None]) -> str:
    return ",".join(_rank(r) for r in ranks)


def grouped_findings(findings: Sequence[Finding]) -> list[tuple[Finding, list[int | None]]]:
    """Findings with the same code, kind and severity on several ranks → the first one and the ranks."""
    groups: dict[tuple[str, str | None, str], tuple[Finding, list[int | None]]] = {}
    for f in findings:
        key = (f.code, f.kind, f.severity)
        if key in groups:
            groups[key][1].append(f.rank)
        else:
            groups[key] = (f, [f.rank])
    return list(groups.values())


def render_ranks(v: CrossRankView, findings: Sequence[Finding], warnings: Sequence[str], console: Console) -> None:
    """The compact rank-folder report: three tables, findings once per cause, warnings."""
    for table in (ranks_table(v), steps_table(v), collectives_table(v)):
        if table is not None:
            console.print(table)
    console.print(Text("findings (per-rank details: --per-rank)", style="bold underline"))
    for f, ranks in grouped_findings(findings):
        where = "" if ranks == [None] else f"[{'rank' if len(ranks) == 1 else 'ranks'} {_rank_list(ranks)}] "
        text = f"  {f.severity:<6} {where}{f.code}: {f.message}"
        if len(ranks) > 1:
            text += f" (shown for rank {_rank(ranks[0])})"
        console.print(Text(text, style=SEVERITY_STYLE.get(f.severity, "")), highlight=False)
    for w in warnings:
        console.print(Text(f"warning: {w}", style="yellow"), highlight=False)
