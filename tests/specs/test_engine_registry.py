"""The one engine registry (specs/data/engines/<engine>.toml, specs.engines): every release of every engine resolves
completely with a source per value; the closed form and the simulation take a step's prompt budget, max_num_seqs and
graph sizes from the same record on every bundled GPU; no engine-name list outside specs/engines.py; a bad file is
refused at load naming the file and the key."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servescope.errors import BadConfig
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import serving_parts
from servescope.simulate import engine_for
from servescope.specs import engine_file, tables
from servescope.specs.engine_file import SCHEMA, parse
from servescope.specs.engines import ENGINES, engine, known_versions, releases, value_since
from servescope.specs.hardware import list_gpus, load_gpu

SRC = Path(__file__).resolve().parents[2] / "src" / "servescope"
GIB = 2.0**30


def test_engines_are_the_file_names_default_first() -> None:
    files = sorted(p.stem for p in (SRC / "specs" / "data" / "engines").glob("*.toml"))
    assert sorted(ENGINES) == files and ENGINES[0] == "vllm"


@pytest.mark.parametrize("backend", ENGINES)
def test_every_release_resolves_completely_with_a_source_per_value(backend: str) -> None:
    for since in known_versions(backend):
        for hbm_gib in (16, 48, 80, 141, 192):
            e = engine(backend, since, hbm_gib * GIB)
            assert e.since == since and e.note == ""
            for section in SCHEMA:
                rec = getattr(e, section)
                for key in SCHEMA[section]:
                    if key in rec.sources:
                        assert len(rec.sources[key].strip()) > 20, (backend, since, section, key)
                    else:  # only the optional keys may be absent, and then the record holds their neutral value
                        assert (section, key) in engine_file.OPTIONAL, (backend, since, section, key)
            s = e.scheduler
            assert s.max_num_seqs >= 1 and s.max_num_batched_tokens >= 1 and e.graphs.capture_sizes[0] >= 1
            assert list(e.graphs.capture_sizes) == sorted(set(e.graphs.capture_sizes))


def test_releases_list_only_what_changed_and_carry_the_rest() -> None:
    old, new = releases("vllm")[0], releases("vllm")[-1]
    assert old.since == "0.10.0" and new.since == "0.14.0"
    assert not old.values["overlap"]["enabled"].value and new.values["overlap"]["enabled"].value
    assert new.values["scheduler"]["max_num_seqs"] == old.values["scheduler"]["max_num_seqs"]  # carried, since 0.10
    assert value_since("vllm", "overlap", "enabled") == "0.14.0"
    assert value_since("vllm", "overlap", "enabled", "0.12.1") == "0.10.0"


def test_vllm_defaults_by_gpu_memory_follow_arg_utils() -> None:
    # EngineArgs._set_default_args, OPENAI_API_SERVER: >= 70 GiB 1024 seqs / 8192 tokens, below 256 / 2048
    small, large = engine("vllm", "", 48e9).scheduler, engine("vllm", "", 80e9).scheduler
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)
    assert (large.max_num_seqs, large.max_num_batched_tokens) == (1024, 8192)
    # SGLang 0.5.9: chunked_prefill_size 4096 below 60 GiB, 8192 below 160, 16384 above; TRT-LLM 8192 everywhere
    assert [engine("sglang", "", g * GIB).scheduler.max_num_batched_tokens for g in (48, 80, 141, 178)] == [
        4096, 8192, 8192, 16384]
    assert {engine("trtllm", "", g * GIB).scheduler.max_num_batched_tokens for g in (24, 80, 192)} == {8192}


@pytest.mark.parametrize("backend", ENGINES)
def test_closed_form_and_simulation_price_the_same_prompt_budget_on_every_gpu(backend: str) -> None:
    """For each bundled GPU the closed form's prefill-wave requests per step (⌊budget/isl⌋) and batch cap, and
    the simulation's token budget and max_num_seqs, come from one value each."""
    isl = 128
    for gpu in list_gpus():
        sc = Scenario.build("llama-3.1-8b", gpu, backend=backend, isl=isl, osl=64, check_memory=False)
        cfg = engine_for(sc)
        p = serving_parts(sc, [1, 100_000])
        assert float(np.ravel(p.per_step)[0]) == max(1, cfg.max_num_batched_tokens // isl), (backend, gpu)
        assert float(np.ravel(p.cap)[0]) <= cfg.max_num_seqs * sc.dp, (backend, gpu)
        want = _budget_from_source(backend, float(load_gpu(gpu).hbm_bytes))
        assert cfg.max_num_batched_tokens == want, (backend, gpu)


def _budget_from_source(backend: str, hbm_bytes: float) -> int:
    """The engines' token budgets as their sources state them (vllm.toml / sglang.toml / trtllm.toml sources)."""
    gib = hbm_bytes / GIB
    if backend == "vllm":
        return 8192 if gib >= 70 else 2048
    if backend == "sglang":
        return 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384
    return 8192


# trace vocabulary, not the registry: the step sources a trace labels itself with (vllm, sglang, atom); analysis/
# sits below specs/ and cannot import it
NOT_ENGINE_LISTS = {"analysis/diff.py"}


def test_no_literal_engine_name_list_outside_the_registry() -> None:
    names = set(ENGINES)
    found = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "specs" / "engines.py" or str(path.relative_to(SRC)) in NOT_ENGINE_LISTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                items = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(items & names) >= 2:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []


def _doc(backend: str = "vllm") -> dict[str, Any]:
    return copy.deepcopy(tables.engine_files()[backend])


def test_the_shipped_files_parse() -> None:
    for backend in ENGINES:
        assert parse(f"{backend}.toml", _doc(backend))


@pytest.mark.parametrize("breakage,match", [
    (lambda d: d["release"][0]["scheduler"].update(max_seqs=4), r"x\.toml release 0\.10\.0 \[scheduler\]: unknown key 'max_seqs'"),
    (lambda d: d["release"][0]["memory"].pop("block_size_tokens_source"),
     r"x\.toml release 0\.10\.0 \[memory\] block_size_tokens: a value without a source"),
    (lambda d: d["release"][1].update(since="0.9.0"), r"x\.toml: since '0\.9\.0' is out of order"),
    (lambda d: d["release"][0].update(since="0.10.0"), None),  # unchanged: parses
    (lambda d: d["release"][0]["graphs"].update(capture_sizes="1,2,x"), r"\[graphs\] capture_sizes: "),
    (lambda d: d["release"][0]["scheduler"].update(max_num_seqs="70:256,100:1024"), r"\[scheduler\] max_num_seqs: "),
    (lambda d: d["release"][0]["scheduler"].update(priority="fifo"), r"\[scheduler\] priority: 'fifo'; known"),
    (lambda d: d["release"][0]["speculative"].pop("host_syncs"),
     r"release 0\.10\.0 \[speculative\] host_syncs: the first release must set every value"),
    (lambda d: d["release"][0].update(extra={}), r"release 0\.10\.0: unknown key 'extra'"),
    (lambda d: d.update(vllm=[]), r"x\.toml: only \[\[release\]\] entries"),
    (lambda d: d["release"][1]["overlap"].update(enabled_source=""), r"\[overlap\] enabled_source: not a non-empty"),
])
def test_a_bad_engine_file_is_refused_naming_the_file_and_the_key(breakage: Any, match: str | None) -> None:
    doc = _doc()
    breakage(doc)
    if match is None:
        assert parse("x.toml", doc)
        return
    with pytest.raises(BadConfig, match=match):
        parse("x.toml", doc)


def test_a_release_number_is_compared_numerically() -> None:
    doc = _doc()
    doc["release"].append({"since": "0.9.9", "overlap": {"enabled": True, "enabled_source": "s" * 30}})
    with pytest.raises(BadConfig, match=re.escape("since '0.9.9' is out of order")):
        parse("x.toml", doc)
    doc["release"][-1]["since"] = "0.100.0"  # after 0.14.0 as a number, before it as text
    assert parse("x.toml", doc)[-1].since == "0.100.0"
