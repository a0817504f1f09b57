"""What a `source` string of the bundled data cites: its source keys resolved to full citations.

Does: find the keys a source text cites (`AIC-SYS rtx_pro_6000_server.yaml; CG-RTX` → AIC-SYS, CG-RTX), the words
it uses instead of a key (UNSOURCED, DERIVED, TRACE, "reference §1a", a model's "bundled:<file>") and the GitHub issues it names
(`owner/repo#N`), and give each its citation (specs/data/sources.toml, read through specs.tables). A key is a whole
token; a family-shaped tag (`R6K-…`, a family of the table's hyphenated keys) that is not a key is returned by
`unresolved` so that a test can list it.
Does not: format (servescope.report) or check that a cited file says what the number claims.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from servescope.errors import BadConfig
from servescope.specs.tables import source_keys

_TOKEN = re.compile(r"(?<![\w/.#-])([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)(?![\w/#-])")
_ISSUE = re.compile(r"(?<![\w/.-])([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#(\d+)\b")
_REFERENCE = re.compile(r"\breference\s+§")
_BUNDLED = re.compile(r"(?<![\w/.-])bundled:")


@dataclass(frozen=True)
class Citation:
    """One thing a source text cites: the key (or word, or `owner/repo#N`) and where it points."""

    key: str
    text: str
    kind: str  # key | word | issue


@cache
def _table() -> tuple[dict[str, str], dict[str, str]]:
    doc = source_keys()
    keys, words = doc.get("keys"), doc.get("words")
    if not isinstance(keys, dict) or not isinstance(words, dict):
        raise BadConfig("specs/data/sources.toml: needs tables [keys] and [words]")
    return {str(k): str(v) for k, v in keys.items()}, {str(k): str(v) for k, v in words.items()}


def _families() -> frozenset[str]:
    """The family of each hyphenated key (`R6K` of R6K-K25): a tag of that shape must be a key."""
    return frozenset(k.split("-", 1)[0] for k in _table()[0] if "-" in k)


def cited(text: str) -> tuple[Citation, ...]:
    """The keys, words and issues `text` cites, each once, in the order they first appear."""
    keys, words = _table()
    found: dict[str, Citation] = {}
    spans = []
    for m in _TOKEN.finditer(text):
        tok = m.group(1)
        if tok in keys:
            spans.append((m.start(), Citation(tok, keys[tok], "key")))
        elif tok in words and tok not in ("reference", "bundled"):
            spans.append((m.start(), Citation(tok, words[tok], "word")))
    for m in _REFERENCE.finditer(text):
        spans.append((m.start(), Citation("reference", words["reference"], "word")))
    for m in _BUNDLED.finditer(text):
        spans.append((m.start(), Citation("bundled", words["bundled"], "word")))
    for m in _ISSUE.finditer(text):
        repo, n = m.group(1), m.group(2)
        spans.append((m.start(), Citation(f"{repo}#{n}", f"https://github.com/{repo}/issues/{n}", "issue")))
    for _, c in sorted(spans, key=lambda s: s[0]):
        found.setdefault(c.key, c)
    return tuple(found.values())


def citations(texts: Iterable[str]) -> tuple[Citation, ...]:
    """What the texts cite together, each once, in order of first appearance."""
    out: dict[str, Citation] = {}
    for t in texts:
        for c in cited(t):
            out.setdefault(c.key, c)
    return tuple(out.values())


def unresolved(text: str) -> tuple[str, ...]:
    """Tags in `text` shaped like a key of a known family (`CG-XYZ`) that the table does not have."""
    keys, families = _table()[0], _families()
    return tuple(dict.fromkeys(
        tok for m in _TOKEN.finditer(text)
        if "-" in (tok := m.group(1)) and tok.split("-", 1)[0] in families and tok not in keys))
