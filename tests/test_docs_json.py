"""docs/json.md and the JSON documents the CLI emits list the same keys, both ways.

How docs/json.md is written (and so parsed here): one `## ` section per group of documents, its heading naming them
(`servescope.trace/1`, ...). Inside a section the keys appear in fenced schema blocks (```` ``` ````) and in inline
code spans of the prose, as quoted names: `{"schema", "points": [{"concurrency", ...}]}`. A quoted name is a *listed
key* unless it stands in a value position (after `:` or `|`, or before `|`: `"kind": "gpu" | "model"`) or is a
span of its own (`` `"measured"` `` names a value as often as a key). A section *documents* every name in its code
spans, quoted or bare (`tpot_ms_low`; `pred_tpot_ms_low/high` is both names).

Forward: every listed key of a section occurs, at some depth, in a document of that section, made by small real
commands (the bundled trace, a two-GPU nsys trace, llama-3.1-8b on H100, five validation rows), except the keys in
ONLY_UNDER, which these commands cannot reach (each with the condition that makes it).
Back: every top-level key of each document, and every key one level down (in an object, or in the objects of a
list), is documented in its section (or in a section it defers to with "as in `report/1`"); maps keyed by data (DATA_KEYED) and documents embedded whole (EMBEDDED, each
documented in its own section) are not descended into.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main

ROOT = Path(__file__).resolve().parents[1]
JSON_MD = ROOT / "docs" / "json.md"
DATA = ROOT / "tests" / "data"
EXAMPLE = ROOT / "src" / "servescope" / "examples" / "b200_vllm_gptoss_tp8_eager_prefill.json.gz"
IDENT = r"[a-z_][a-z0-9_]*"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`]+)`")
QUOTED = re.compile(rf'"({IDENT})"')

# listed keys no command below produces, and why
ONLY_UNDER = {
    "trace": dict.fromkeys(("per_rank_us", "skew_us", "max_rank", "min_rank"),
                           "cross_rank.collectives[]: the two-GPU nsys trace ran no collective kernel"),
    "verify": {"evidence": "found[] is filled only when --before and --after are two traces"},
    "model": {"share": "calibration.shares[]: only figures that give a class's share of the step fill it",
              "warning": "cross_validation.*.warning: a grouping with too few groups to fold"},
    "validate": {"reason": "skipped[]: a row the model cannot price"},
    "simulate": dict.fromkeys(("replay", "format", "file", "error", "ttft_mean", "tpot_mean", "e2e_mean", "runs",
                               "measured", "line", "tool", "label", "comparison", "metric", "simulated", "error_pct"),
                              "simulate --replay FILE / --compare FILE / --measured"),
}
DATA_KEYED = {"validate": {"by_system", "by_backend", "by_model"}, "spec": {"fields", "sources"}}
EMBEDDED = {"report": {"trace", "plan"}}


def sections(text: str) -> dict[str, tuple[tuple[str, ...], list[str], set[str]]]:
    """Schema name (trace, model, ...) → (the names its section's heading gives, that section's code spans, the
    documents it defers to: "as in `report/1`")."""
    out: dict[str, tuple[tuple[str, ...], list[str], set[str]]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        names = tuple(re.findall(r"servescope\.(\w+)/1", head))
        spans = FENCE.findall(body) + INLINE.findall(FENCE.sub("", body))
        refs = set(re.findall(r"as in `?(\w+)/1", body))
        for name in names:
            out[name] = (names, spans, refs)
    return out


def listed_keys(span: str) -> set[str]:
    keys = set()
    for m in QUOTED.finditer(span):
        before, after = span[:m.start()].rstrip(), span[m.end():].lstrip()
        if before.endswith((":", "|")) or after.startswith("|") or (not before and not after):
            continue
        keys.add(m.group(1))
    return keys


def documented(span: str) -> set[str]:
    words = set(re.findall(rf"\b{IDENT}\b", span))
    for m in re.finditer(rf"\b({IDENT})_({IDENT})/({IDENT})\b", span):
        words |= {f"{m.group(1)}_{m.group(2)}", f"{m.group(1)}_{m.group(3)}"}
    return words


def all_keys(doc: object) -> set[str]:
    if isinstance(doc, dict):
        return set(doc) | set().union(*(all_keys(v) for v in doc.values()))
    if isinstance(doc, list):
        return set().union(*(all_keys(v) for v in doc))
    return set()


def two_levels(doc: dict, schema: str) -> set[str]:
    keys = set(doc)
    for k, v in doc.items():
        if k in DATA_KEYED.get(schema, set()) | EMBEDDED.get(schema, set()):
            continue
        for item in v if isinstance(v, list) else [v]:
            if isinstance(item, dict):
                keys |= set(item)
    return keys


def serving_rows(tmp: Path) -> Path:
    """Nine rows of the dev CSV over three models (enough for every cross-validation grouping to have folds)."""
    lines = (DATA / "validation" / "measured_serving_dev.csv").read_text(encoding="utf-8").splitlines()
    picked = [r for m in ("Llama-3.1-8B", "Qwen3-8B") for r in [x for x in lines[1:] if m in x][:3]] + lines[1:4]
    path = tmp / "rows.csv"
    path.write_text("\n".join([lines[0], *picked]) + "\n", encoding="utf-8")
    return path


COMMANDS = [  # (schema, argv); run in order in one folder (verify reads plan.json)
    ("trace", ["trace", "--json"]),
    ("trace", ["trace", str(DATA / "traces" / "nsys-ai" / "h100_2gpu_1s.sqlite"), "--json"]),
    ("model", ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "1,64", "--json"]),
    ("model", ["model", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "2", "--concurrency", "1,64",
               "--measured", "tpot=8ms@c1", "--json"]),
    ("plan", ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--target", "1000tok/s", "--json", "-o",
              "plan.json"]),
    ("plan", ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--measured", "tpot=8ms@c1", "--json"]),
    ("validate", ["validate", "rows.csv", "--cv", "--json"]),
    ("validate", ["validate", str(DATA / "validation" / "decode_only_rows.csv"), "--json"]),
    ("simulate", ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", "8", "--num-prompts",
                  "40", "--json"]),
    ("verify", ["verify", "plan.json", "--before", "output=1000tok/s@c1", "--after", "output=1100tok/s@c1",
                "--applied", "quantization", "--log", "c.jsonl", "--json"]),
    ("campaign", ["verify", "--log", "c.jsonl", "--json"]),
    ("report", ["report", str(EXAMPLE), "--model", "gpt-oss-120b", "--gpu", "b200", "--tp", "8", "--json"]),
    ("specs", ["specs", "list", "--json"]),
    ("spec", ["specs", "show", "h100_sxm", "--json"]),
]


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> dict[str, list[dict]]:
    """The commands in process (as the CLI tests drive them; the same keys as `python -m servescope`, and no
    interpreter start and imports per command: ~6 of ~8 CPU s), in one folder as their working directory."""
    tmp = tmp_path_factory.mktemp("json_docs")
    serving_rows(tmp)
    docs: dict[str, list[dict]] = {}
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        for schema, argv in COMMANDS:
            r = CliRunner().invoke(main, argv)
            assert r.exit_code == 0, f"servescope {' '.join(argv)}: {r.output}"
            doc = json.loads((tmp / "plan.json").read_text(encoding="utf-8") if "-o" in argv else r.stdout)
            assert doc["schema"] == f"servescope.{schema}/1"
            docs.setdefault(schema, []).append(doc)
    finally:
        os.chdir(cwd)
    return docs


SECTIONS = sections(JSON_MD.read_text(encoding="utf-8"))
TESTED = sorted({s for s, _ in COMMANDS})


def test_json_md_has_a_section_for_every_tested_document():
    assert set(TESTED) <= set(SECTIONS), sorted(set(TESTED) - set(SECTIONS))


def test_the_parser_tells_keys_from_values():
    span = '{"schema", "kind": "gpu" | "model", "points": [{"concurrency"}], "basis": "track" | "product"}'
    assert listed_keys(span) == {"schema", "kind", "points", "concurrency", "basis"}
    assert listed_keys('"measured"') == set()
    assert {"pred_tpot_ms_low", "pred_tpot_ms_high"} <= documented("`pred_tpot_ms_low/high`")


@pytest.mark.parametrize("schema", TESTED)
def test_every_listed_key_is_emitted(schema, emitted):
    # the section may name several documents (model/validate/plan): a key listed there is emitted by one of them
    names, spans, _ = SECTIONS[schema]
    if any(n not in TESTED for n in names):
        pytest.skip(f"the section also lists {names}, not all of them run here")
    have = set().union(*(all_keys(d) for n in names for d in emitted[n]))
    listed = set().union(*(listed_keys(s) for s in spans))
    excused = set().union(*(ONLY_UNDER.get(n, {}).keys() for n in names))
    missing = sorted(listed - have - excused)
    assert not missing, f"docs/json.md lists keys no {'/'.join(names)} document emits: {missing}"


@pytest.mark.parametrize("schema", TESTED)
def test_every_emitted_key_is_documented(schema, emitted):
    _, spans, refs = SECTIONS[schema]
    # a section that says "as in `report/1`" documents those keys there (the scenario object)
    spans = spans + [s for r in refs if r in SECTIONS for s in SECTIONS[r][1]]
    docs = set().union(*(documented(s) for s in spans))
    keys = set().union(*(two_levels(d, schema) for d in emitted[schema]))
    missing = sorted(keys - docs)
    assert not missing, f"{schema}/1 emits keys docs/json.md does not document: {missing}"
