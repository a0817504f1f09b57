"""Every source tag of the bundled data resolves to a full citation (specs/sources.py, specs/data/sources.toml), and
`specs show` prints it; numbers print in engineering units, never with an exponent."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.report.specs_text import count, plain, rate, size, value_text
from servescope.specs.hardware import list_gpus, load_gpu
from servescope.specs.sources import cited, unresolved

ROOT = Path(__file__).parents[2]
DATA = ROOT / "src/servescope/specs/data"
REFERENCE = ROOT.parent / "shared" / "reference" / "hardware-and-models.md"
# A tag as the data write them: capitals and digits, hyphenated (AIC-SYS, R6K-K26v4). These look like one and are
# not: a product, a model size or a compound word of the text around them.
TAG_SHAPE = re.compile(r"(?<![\w/.#-])([A-Z][A-Z0-9]+(?:-[A-Z0-9][A-Za-z0-9]*)+)(?![\w/-])")
NOT_TAGS = {"TRT-LLM", "EAGLE-3", "GPU-GPU", "A100-SXM4-80GB"}


def _sources() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    def walk(x: object, where: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "source" and isinstance(v, str):
                    out.append((where, v))
                else:
                    walk(v, where)
        elif isinstance(x, list):
            for v in x:
                walk(v, where)

    for p in sorted(DATA.rglob("*.toml")):
        if p.name != "sources.toml":
            walk(tomllib.loads(p.read_text(encoding="utf-8")), str(p.relative_to(DATA)))
    return out


def test_every_tag_in_the_data_resolves() -> None:
    sources = _sources()
    assert len(sources) > 300  # the GPU, collective and engine files
    keys = set(tomllib.loads((DATA / "sources.toml").read_text(encoding="utf-8"))["keys"])
    nowhere = sorted({f"{where}: {tag}" for where, text in sources
                      for tag in {*unresolved(text), *(t for t in TAG_SHAPE.findall(text) if t not in NOT_TAGS)}
                      if tag not in keys})
    assert not nowhere, "source tags that resolve nowhere:\n" + "\n".join(nowhere)
    used = {c.key for _, text in sources for c in cited(text) if c.kind == "key"}
    assert {"AIC-SYS", "AIC-COMM", "CG-RTX", "R6K-PCIE", "LLMC-MFU", "MI-REP", "VLLM-CAR"} <= used


@pytest.mark.skipif(not REFERENCE.exists(), reason="needs the shared reference notes")
def test_the_table_holds_every_key_of_the_reference() -> None:
    """Independently: the §0 keys of the reference notes, with `A / B` rows and the R6K family expanded."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text[text.index("## 0. Source keys"):text.index("## 1.")]
    ref: set[str] = set()
    for row in re.findall(r"^\| ([^|]+) \|", section, re.M):
        if row.strip() in ("Key", "Issues", "---"):
            continue
        if row.strip() == "R6K-*":
            members = re.search(r"R6K-\* \|.*$", section, re.M)
            assert members is not None
            ref |= {f"R6K-{m}" for m in re.findall(r"(\w+)=`", members.group(0))}
        else:
            ref |= {k.strip() for k in row.split("/")}
    keys = set(tomllib.loads((DATA / "sources.toml").read_text(encoding="utf-8"))["keys"])
    assert ref - {"---"} <= keys, sorted(ref - keys)


def test_a_tag_that_resolves_nowhere_is_listed() -> None:
    assert unresolved("CG-RTX; R6K-K99 and CG-FOO (TRT-LLM)") == ("R6K-K99", "CG-FOO")
    got = [(c.key, c.kind) for c in cited("zzc0721/x-y#162 (BF16, reference §1b); R6K-PCIE; UNSOURCED: z")]
    assert got == [("zzc0721/x-y#162", "issue"), ("reference", "word"), ("R6K-PCIE", "key"), ("UNSOURCED", "word")]


def test_specs_show_prints_each_cited_key_once_with_its_citation() -> None:
    runner = CliRunner()
    out = runner.invoke(main, ["specs", "show", "rtx-pro-6000"], env={"COLUMNS": "200"}).output
    tail = out[out.index("sources cited"):]
    for key, where in (("CG-RTX", "callgideon/model-inference"), ("AIC-SYS", "ai-dynamo/aiconfigurator"),
                       ("R6K-PCIE", "hardware/pcie-bandwidth.md"),
                       ("zzc0721/torch-performance-test-data#162",
                        "https://github.com/zzc0721/torch-performance-test-data/issues/162")):
        assert re.search(rf"^{re.escape(key)} +.*{re.escape(where)}", tail, re.M), key
    doc = json.loads(runner.invoke(main, ["specs", "show", "rtx-pro-6000", "--json"]).output)
    assert {c["key"] for c in doc["citations"]} >= {"CG-RTX", "AIC-SYS", "R6K-PCIE", "UNSOURCED", "reference"}
    model = runner.invoke(main, ["specs", "show", "kimi-k2.5"], env={"COLUMNS": "200"}).output
    assert "bundled " in model[model.index("sources cited"):] and "AIC-MC" in model


def test_specs_show_never_prints_an_exponent() -> None:
    for gpu in list_gpus():  # every value of every GPU, as the table prints it (no Rich: fast)
        spec = load_gpu(gpu)
        for f in dataclasses.fields(spec):
            text = value_text(f.name, getattr(spec, f.name))
            assert not re.search(r"\d[eE][+-]?\d", text), (gpu, f.name, text)
        bw = spec.hbm_bw_bytes_per_s  # as the datasheets say: 1.597 TB/s, 864 GB/s
        want = f"{bw / 1e12:.3f}".rstrip("0").rstrip(".") + " TB/s" if bw >= 1e12 else f"{bw / 1e9:g} GB/s"
        assert value_text("hbm_bw_bytes_per_s", bw) == want
    out = CliRunner().invoke(main, ["specs", "show", "rtx-pro-6000"], env={"COLUMNS": "200"}).output
    assert "1.597 TB/s" in out and "1,871 TFLOP/s" in out and "e+" not in out


def test_engineering_units() -> None:
    assert rate([1.597e12], "B/s") == (["1.597"], "TB/s")
    assert rate([467.8e12, 1871.2e12], "FLOP/s") == (["467.8", "1,871"], "TFLOP/s")  # one prefix for a dict
    assert rate([0.0], "B/s") == (["0"], "GB/s")
    assert size(128 * 2**20) == "128 MiB" and size(101_376) == "99 KiB"
    assert size(102_641_958_912) == "95.59 GiB = 102.6 GB"
    assert count(6_168_569_856) == "6.169 B" and count(44_040_192) == "44.04 M"
    assert [plain(x) for x in (0.8, 600.0, 163_840, 0.5625)] == ["0.8", "600", "163,840", "0.5625"]
