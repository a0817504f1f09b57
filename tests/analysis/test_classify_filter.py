"""Tests for the vectorised rule prefilter of servescope.analysis.classify (issue 30.2): a name no rule's superset
pattern (rules.superset_pattern, Rust regex via Polars) matches is "other" without a `classify_name` call, so the
classes of every name must be what `classify_name` gives it, on every real name and on generated ones.

The superset claim is checked rule by rule (a Python match in the name's head implies a Polars match of that rule's
superset pattern in the whole name), which is stronger than what `classify` needs (some superset pattern matches).
"""

from __future__ import annotations

import csv
import gzip
import re
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.analysis import classify as classify_module
from servescope.analysis.classify import MAX_CLASSIFIED_CHARS, classify, classify_name, name_head
from servescope.analysis.rules import RULES, superset_pattern

DATA = Path(__file__).parents[1] / "data"
TRACES = DATA / "traces"
_COMPILED = [re.compile(pattern, re.IGNORECASE) for pattern, _, _ in RULES]
_SUPERSETS = [superset_pattern(pattern) for pattern, _, _ in RULES]


def _event_names(doc: Any) -> set[str]:
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return {e["name"] for e in events if isinstance(e, dict) and isinstance(e.get("name"), str)}


@cache
def real_names() -> tuple[str, ...]:
    """Every event name (kernels, ops, annotations) of every trace under tests/data/traces (JSON: stdlib json;
    Nsight SQLite: its StringIds), the hand-labelled kernel_names.csv and test_classify's constructed names."""
    names: set[str] = set()
    for path in sorted(TRACES.rglob("*.json*")):
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        try:
            names |= _event_names(msgspec.json.decode(raw))
        except msgspec.DecodeError:
            continue  # not a trace document
    for path in sorted(TRACES.rglob("*.sqlite")):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            names |= {row[0] for row in db.execute("SELECT value FROM StringIds") if isinstance(row[0], str)}
    with (DATA / "kernel_names.csv").open(newline="", encoding="utf-8") as fh:
        names |= {row["name"] for row in csv.DictReader(fh)}
    from tests.analysis.test_classify import CONSTRUCTED

    names |= {name for name, _, _ in CONSTRUCTED}
    return tuple(sorted(names))


def _superset_misses(names: list[str]) -> list[tuple[str, str]]:
    """(rule pattern, name) where the rule matches the name's head in Python but its superset misses the name."""
    printable = [n for n in names if re.fullmatch(r"[ -~]*", n) and len(name_head(n)) <= MAX_CLASSIFIED_CHARS]
    if not printable:
        return []
    found = pl.DataFrame({"n": printable}).select(  # one query: a column per rule
        pl.col("n").str.contains(superset).alias(str(i)) for i, superset in enumerate(_SUPERSETS))
    heads = [name_head(n) for n in printable]
    misses = []
    for i, ((pattern, _, _), compiled) in enumerate(zip(RULES, _COMPILED, strict=True)):
        misses += [(pattern, printable[k]) for k, hit in enumerate(found[str(i)].to_list())
                   if not hit and compiled.search(heads[k])]
    return misses


def _candidates(names: list[str]) -> set[str]:
    """The names the prefilter sends to classify_name (the filter itself, whatever the number of names)."""
    series = pl.Series(names, dtype=pl.Utf8)
    return set(series.filter(series.str.contains(classify_module._superset())).to_list())


def _classes_through_frame(names: list[str]) -> list[tuple[str, str | None]]:
    frame = pl.DataFrame({"kind": ["kernel"] * len(names), "name": names})
    out = classify(frame)
    return list(zip(out["kernel_class"].to_list(), out["collective"].to_list(), strict=True))


def test_real_names_are_many_and_varied() -> None:
    names = real_names()
    assert len(names) > 2000
    classes = {classify_name(n)[0] for n in names}
    assert len(classes) >= 9  # the rule families are exercised, not just "other"


def test_every_rule_superset_holds_on_real_names() -> None:
    assert _superset_misses(list(real_names())) == []


def test_prefilter_keeps_every_classified_real_name() -> None:
    names = list(real_names())
    kept = _candidates(names)
    lost = [n for n in names if n not in kept and classify_name(n) != ("other", None)]
    assert lost == []
    assert len(kept) < len(names)  # it does filter


def test_frame_classes_equal_per_name_classes_on_real_names() -> None:
    names = list(real_names())
    assert len(names) > classify_module._FEW_NAMES  # the frame path filters
    assert _classes_through_frame(names) == [classify_name(n) for n in names]


def test_distinct_inductor_names_are_other_without_python(monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"triton_poi_fused_add_{i}" for i in range(5000)] + ["rms_norm_kernel", "Memcpy DtoD"]
    calls: list[str] = []
    real = classify_module.classify_name

    def counting(name: str) -> tuple[str, str | None]:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(classify_module, "classify_name", counting)
    got = _classes_through_frame(names)
    assert got[:5000] == [("other", None)] * 5000
    assert got[5000:] == [("norm", None), ("memory", None)]
    assert sorted(calls) == ["Memcpy DtoD", "rms_norm_kernel"]


def test_translation_refuses_what_it_cannot_translate() -> None:
    with pytest.raises(ValueError):
        superset_pattern(r"(a)\1")  # a back-reference
    with pytest.raises(ValueError):
        superset_pattern("é")  # case folding differs between engines outside ASCII
    assert superset_pattern(r"(?<!p)rope(?!rt)$") == "(?i:rope)"


def test_non_ascii_and_control_names_go_to_python() -> None:
    names = ["\x1crms_norm", "rms\u00a0norm", "k\u212a_gemm", "x\tgemm", "\u00bdgemm"]
    assert _candidates(names) == set(names)


# Names built from the rules' own words, digits, separators and argument lists: the texts where a translation slip
# (a lookaround kept, a class or a case flag wrong, head against whole name) would show.
_WORDS = sorted({w for pattern, _, _ in RULES for w in re.findall(r"[A-Za-z]{2,}", pattern)})
_PIECES = st.one_of(
    st.sampled_from(_WORDS), st.sampled_from(_WORDS).map(str.upper), st.sampled_from(_WORDS).map(str.title),
    st.sampled_from(["_", "__", "::", ":", " ", "(", ")", "<", ">", ", ", "void ", "$", "\\", "-", ".", "*"]),
    st.from_regex(r"[0-9]{1,4}", fullmatch=True), st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=3),
    st.sampled_from(["\u00a0", "\x1c", "\u212a", "\u017f", "\u00bd", "\t", "\n"]),
)
_NAMES = st.lists(_PIECES, min_size=1, max_size=10).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=40))
def test_superset_and_prefilter_on_generated_names(names: list[str]) -> None:
    assert _superset_misses(names) == []
    kept = _candidates(names)
    assert [n for n in names if n not in kept and classify_name(n) != ("other", None)] == []


@settings(max_examples=25, deadline=None)
@given(st.lists(_NAMES, min_size=1, max_size=60))
def test_frame_classes_equal_per_name_classes_on_generated_names(names: list[str]) -> None:
    padded = names + [f"triton_poi_fused_add_{i}" for i in range(classify_module._FEW_NAMES + 1)]
    assert _classes_through_frame(padded) == [classify_name(n) for n in padded]
