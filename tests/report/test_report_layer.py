"""One output layer: documents (JSON contracts) and renderers live in servescope.report, nowhere else."""

from __future__ import annotations

import re
from pathlib import Path

import servescope

SRC = Path(servescope.__file__).parent
SCHEMA_STRING = re.compile(r"""["']servescope\.[a-z_]+/\d+["']""")
DOCUMENT_DEF = re.compile(r"^def \w+_(document|lines)\(", re.M)


def _outside_report() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "report" not in p.relative_to(SRC).parts]


def test_no_schema_string_outside_report() -> None:
    offenders = [str(p.relative_to(SRC)) for p in _outside_report() if SCHEMA_STRING.search(p.read_text())]
    assert offenders == []


def test_no_document_or_lines_function_outside_report() -> None:
    offenders = [str(p.relative_to(SRC)) for p in _outside_report() if DOCUMENT_DEF.search(p.read_text())]
    assert offenders == []


def test_every_schema_is_defined_once_in_report() -> None:
    found = [m.group(0) for p in (SRC / "report").rglob("*.py") for m in SCHEMA_STRING.finditer(p.read_text())
             if re.search(r"^SCHEMA\s*=\s*" + re.escape(m.group(0)), p.read_text(), re.M)]
    assert {"'servescope.trace/1'", '"servescope.trace/1"'} & set(found)
    assert '"servescope.model/1"' in found and '"servescope.plan/1"' in found and '"servescope.validate/1"' in found
    assert len(found) == len(set(found))
