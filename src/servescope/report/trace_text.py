"""Terminal report for `servescope trace` (Rich tables). Presentation only: shares are part/denominator of
numbers the analysis already holds, and each table names its denominator."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from servescope.analysis.analyze import TraceAnalysis
from servescope.analysis.breakdown import KindSummary, TraceBreakdown
from servescope.analysis.roofline import SHAPE_STATUS_TEXT, Peaks, Roofline, roofline
from servescope.report.trace_json import rank_peaks
from servescope.units import GIGA, KILO, MEGA

SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan", "info": "dim"}
GENERIC_NAMES = {"Kernel", "Kernel2", "device_kernel", "kernel", "kernel_entry", "kentry"}
# Type names that are a kernel's argument, never the kernel: `…Params`, `…Metadata`, `…Accessor`, `…Args`.
ARGUMENT_TYPE = re.compile(r"(Params|Metadata|Accessor|Args|Arguments)$")
_BUILTIN = {"int", "float", "double", "bool", "char", "long", "short", "void", "half", "size_t", "int64_t",
            "int32_t", "uint32_t", "uint64_t", "__half", "__nv_bfloat16", "__hip_bfloat16"}
_OPEN, _CLOSE = "<([{", ">)]}"
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::|`anonymous namespace'::")


@dataclass(frozen=True)
class _Signature:
    """A demangled C++ function signature taken apart: the function's own name (no namespace), its
    namespace (`a::b`), the function's template arguments and parameters (each one top-level item, as written)."""

    function: str
    namespace: str
    template_args: tuple[str, ...]
    params: tuple[str, ...]


UNNAMED_GPU = "GPU not named in the trace"


def trace_gpu(name: str | None, num_sms: int | None = None) -> str:
    """The GPU a trace ran on as a header says it: the trace's own name for it (deviceProperties, Nsight's
    TARGET_INFO tables), else that the trace does not name it; ` (N SMs)` when the count is known."""
    sms = f" ({num_sms} SMs)" if num_sms else ""
    return f"{name or UNNAMED_GPU}{sms}"


def _groups(text: str) -> list[tuple[str, str]]:
    """Split text into top-level pieces: ("", plain text) and (opening bracket, content inside it).
    `<`/`>` are brackets except inside parentheses opened within template arguments, where `(8)>(0)` is a
    comparison; a `>` with no open `<` (`->`) is text."""
    out: list[tuple[str, str]] = []
    stack: list[str] = []  # "<", "(" (parameter list), "e" (expression parentheses), "[", "{"
    buf: list[str] = []
    for ch in text:
        top = stack[-1] if stack else ""
        if ch == "<" and top != "e":
            stack.append("<")
        elif ch == "(":
            stack.append("e" if top in ("<", "e") else "(")
        elif ch in "[{":
            stack.append(ch)
        elif ch == ">" and top == "<" or ch == ")" and top in ("(", "e") or (ch == "]" and top == "[") or (ch == "}" and top == "{"):
            stack.pop()
        else:
            buf.append(ch)
            continue
        opened = ch in _OPEN
        if len(stack) == (1 if opened else 0):  # a top-level group starts or ends here
            if opened:
                out.append(("", "".join(buf)))
                buf = []
            else:
                out.append((_OPEN[_CLOSE.index(ch)], "".join(buf)))
                buf = []
            continue
        buf.append(ch)
    out.append(("", "".join(buf)))
    return [(kind, part) for kind, part in out if kind or part]


def _split_top(text: str) -> tuple[str, ...]:
    """Top-level comma-separated items of a bracket's content."""
    items: list[str] = []
    cur: list[str] = []
    for kind, part in _groups(text):
        if kind:
            cur.append(kind + part + _CLOSE[_OPEN.index(kind)])
            continue
        pieces = part.split(",")
        cur.append(pieces[0])
        for p in pieces[1:]:
            items.append("".join(cur).strip())
            cur = [p]
    items.append("".join(cur).strip())
    return tuple(i for i in items if i)


def _plain(text: str) -> str:
    """The text with every bracket group removed."""
    return "".join(part for kind, part in _groups(text) if not kind)


def parse_signature(name: str) -> _Signature:
    """Take a demangled name apart: return type dropped, the function's name, its namespace, template arguments
    and parameters. A name without a parameter list (`volta_sgemm_128x32_nt`) is all function."""
    text = _ANONYMOUS.sub("", name.strip())
    groups = _groups(text)
    params: tuple[str, ...] = ()
    if len(groups) >= 2 and groups[-1][0] == "(":  # the parameter list closes the signature
        params = _split_top(groups[-1][1])
        groups = groups[:-1]
    template_args: tuple[str, ...] = ()
    if len(groups) >= 2 and groups[-1][0] == "<":  # the function's own template arguments
        template_args = _split_top(groups[-1][1])
        groups = groups[:-1]
    # The qualified name is the last word of the text outside brackets: `std::enable_if<…>::type ns::f` → `ns::f`.
    qualified = "".join(part for kind, part in groups if not kind).split()
    full = qualified[-1] if qualified else ""
    namespace, _, function = full.rpartition("::")
    return _Signature(function or full, namespace, template_args, params)


def _type_name(item: str) -> str:
    """`flash::FlashAttnFwdSm90<…>` → `FlashAttnFwdSm90`; `c10::BFloat16 const*` → `BFloat16`."""
    words = [w for w in re.split(r"[\s*&]+", _plain(item)) if w and w not in ("const", "volatile", "struct",
                                                                              "class", "unsigned", "signed")]
    return words[0].rpartition("::")[2] if words else ""


def short_name(name: str, width: int = 48) -> str:
    """A kernel name a person can read in a table: the function of the demangled signature, without return type,
    namespaces, template arguments or parameters (`void at::native::(anonymous namespace)::
    vectorized_elementwise_kernel<4, …>(int, …)` → `vectorized_elementwise_kernel`), never a template argument's
    type. A generic wrapper (`cutlass::Kernel2<…>`, `cutlass::device_kernel<flash::FlashAttnFwdSm90<…>>`) shows
    the kernel it wraps instead. Two kernels may share a short name; tables use `short_names`."""
    return _fit(_base_name(name), width)


_MANGLED_PART = re.compile(r"(?<=[NIE_])(\d+)(?=[A-Za-z_])")


def _mangled(name: str) -> tuple[str, str]:
    """(function, what follows it) of an Itanium-mangled nested name (`_ZN5aiter19fmha_fwd_hd128_bf16E`, ROCm
    traces): the last length-prefixed part of the `_ZN…` prefix; a generic wrapper (`ck_tile::kentry<2,
    FmhaBatchPrefill…>`) gives the first name in its template arguments."""
    i, parts = 3, []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
    if not parts:
        return name, ""
    function, rest = parts[-1], name[i:]
    if function in GENERIC_NAMES and (m := _MANGLED_PART.search(rest)):
        function = rest[m.end():m.end() + int(m.group(1))]
    return function, rest


def _base_name(name: str) -> str:
    if name.startswith(("Memcpy", "Memset")):
        return name.split(" (")[0]
    if name.startswith("_ZN"):
        return _mangled(name)[0]
    if not any(mark in name for mark in ("(", "<", "::")):  # not a C++ signature: the name as written
        return name.strip()
    sig = parse_signature(name)
    short, args = sig.function, sig.template_args
    while (short in GENERIC_NAMES or short.startswith("enable_")) and args:
        inner = _type_name(args[0])
        if not inner or ARGUMENT_TYPE.search(inner) or inner[0].isdigit() or inner in _BUILTIN:
            break
        short, args = inner, parse_signature(args[0]).template_args
    if short in GENERIC_NAMES and sig.namespace:  # `internal::gemvx::kernel<int, …>`: name the namespace
        short = f"{sig.namespace.rpartition('::')[2]}::{short}"
    return short or name.split("(")[0].strip() or name


def cut(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in "…" when cut (a label that was cut says so)."""
    return _fit(text, width)


def _fit(text: str, width: int, keep_end: str = "") -> str:
    """Cut text to width with an ellipsis, keeping `keep_end` (a distinguishing suffix) whole."""
    if len(text) + len(keep_end) <= width:
        return text + keep_end
    return text[: max(width - len(keep_end) - 1, 1)] + "…" + keep_end


def _fragments(name: str) -> dict[str, str]:
    """What may tell two kernels of one short name apart, by position: each template argument, each parameter,
    the namespace; each written short (`<…>` of nested templates kept as-is but namespaces dropped)."""
    if name.startswith("_ZN"):
        rest = _mangled(name)[1]
        return {"t0": rest} if rest else {}
    sig = parse_signature(name)
    out = {f"t{i}": _compact(a) for i, a in enumerate(sig.template_args)}
    out |= {f"p{i}": _compact(a) for i, a in enumerate(sig.params)}
    if sig.namespace:
        out["ns"] = sig.namespace.rpartition("::")[2] or sig.namespace
    return out


def _compact(item: str) -> str:
    return re.sub(r"\b(?:[A-Za-z_]\w*::)+", "", item).replace(" ", "")


def _suffix(position: str, fragment: str) -> str:
    return f"<{fragment}>" if position.startswith("t") else f"({fragment})"


def short_names(names: Iterable[str], width: int = 48) -> dict[str, str]:
    """The short name of each distinct full name of one table, distinct for distinct names: kernels that share
    a short name get the shortest template argument, parameter or namespace that tells them all apart
    (`reshape_and_cache_flash_kernel<__nv_bfloat16>`), else `#2`, `#3`… in the order given; names cut to
    one prefix are cut in the middle instead (`nvjet_tst_192x…_coopA_NNT`)."""
    distinct = list(dict.fromkeys(names))
    by_base: dict[str, list[str]] = {}
    for n in distinct:
        by_base.setdefault(_base_name(n), []).append(n)
    parts: dict[str, tuple[str, str]] = {}  # name → (base, distinguishing suffix)
    for base, group in by_base.items():
        if len(group) == 1:
            parts[group[0]] = (base, "")
            continue
        frags = [_fragments(n) for n in group]
        best: tuple[int, str] | None = None
        for key in dict.fromkeys(k for f in frags for k in f):
            values = [f.get(key, "") for f in frags]
            cost = max(len(v) for v in values)
            if all(values) and len(set(values)) == len(values) and (best is None or cost < best[0]):
                best = (cost, key)
        for i, (n, f) in enumerate(zip(group, frags, strict=True)):
            if best is not None and best[0] <= max(width // 2, 12):
                pos = best[1]
                parts[n] = (f"{f[pos]}::{base}", "") if pos == "ns" else (base, _suffix(pos, f[pos]))
            else:
                parts[n] = (base, f" #{i + 1}" if i else "")
    return _unique(parts, width)


def _unique(parts: dict[str, tuple[str, str]], width: int) -> dict[str, str]:
    """Fit each label to width; labels that coincide once cut are cut in the middle, then numbered #2, #3…"""
    out = {n: _fit(base, width, suffix) for n, (base, suffix) in parts.items()}
    counts = Counter(out.values())
    for n, (base, suffix) in parts.items():
        if counts[out[n]] > 1:
            out[n] = _fit_middle(base + suffix, width)
    used: set[str] = set()
    for n, label in out.items():
        k, fitted = 1, label
        while fitted in used:
            k += 1
            fitted = _fit(label.removesuffix("…"), width, f" #{k}")
        used.add(fitted)
        out[n] = fitted
    return out


def _fit_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


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
