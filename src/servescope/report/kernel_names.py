"""Short, readable kernel names for reports: a demangled C++ signature taken apart (`parse_signature`), its
function name without namespaces, template arguments or parameters (`short_name`), and a set of names made
distinct within a width by adding back the fragment that tells them apart (`short_names`); `cut` shortens any text
to a width with an ellipsis. Argument types (`…Params`, `…Metadata`) and generic entry names (`kernel`) are never
taken for the kernel's name.
Does not: classify kernels (analysis.classify) or lay out tables (report.trace_text, which re-exports `cut`,
`short_name` and `short_names`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

GENERIC_NAMES = {"Kernel", "Kernel2", "device_kernel", "kernel", "kernel_entry", "kentry"}
# Type names that are a kernel's argument, never the kernel: `…Params`, `…Metadata`, `…Accessor`, `…Args`.
ARGUMENT_TYPE = re.compile(r"(Params|Metadata|Accessor|Args|Arguments)$")
_BUILTIN = {"int", "float", "double", "bool", "char", "long", "short", "void", "half", "size_t", "int64_t",
            "int32_t", "uint32_t", "uint64_t", "__half", "__nv_bfloat16", "__hip_bfloat16"}
_OPEN, _CLOSE = "<([{", ">)]}"
_BRACKETS = re.compile(r"[<>()\[\]{}]")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::|`anonymous namespace'::")


@dataclass(frozen=True)
class _Signature:
    """A demangled C++ function signature taken apart: the function's own name (no namespace), its
    namespace (`a::b`), the function's template arguments and parameters (each one top-level item, as written)."""

    function: str
    namespace: str
    template_args: tuple[str, ...]
    params: tuple[str, ...]


def _groups(text: str) -> list[tuple[str, str]]:
    """Split text into top-level pieces: ("", plain text) and (opening bracket, content inside it).
    `<`/`>` are brackets except inside parentheses opened within template arguments, where `(8)>(0)` is a
    comparison; a `>` with no open `<` (`->`) is text. The text between two bracket characters is copied as one
    slice (a CUTLASS name is thousands of characters with a few hundred brackets: ~3x faster than char by char)."""
    out: list[tuple[str, str]] = []
    stack: list[str] = []  # "<", "(" (parameter list), "e" (expression parentheses), "[", "{"
    buf: list[str] = []
    pos = 0
    for m in _BRACKETS.finditer(text):
        i = m.start()
        ch = text[i]
        buf.append(text[pos:i])
        pos = i + 1
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
            out.append(("" if opened else _OPEN[_CLOSE.index(ch)], "".join(buf)))
            buf = []
            continue
        buf.append(ch)
    buf.append(text[pos:])
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
