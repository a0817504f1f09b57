"""--model NAME finds a config.json in the local Hugging Face cache (a fake cache built here in tmp_path, holding
a real config: openai/gpt-oss-20b, tests/data/planner) before failing, and the failure says how to fetch one."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from independent import DATA
from servescope.cli import main
from servescope.errors import UnknownName
from servescope.specs.models import load_model

REAL_CONFIG = DATA / "planner" / "openai--gpt-oss-20b_config.json"
NAME = "Testorg/Tiny-OSS"  # not bundled; folder names keep HF's case, lookups ignore it
HF_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for var in HF_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no real ~/.cache leaks in
    load_model.cache_clear()
    yield
    load_model.cache_clear()


def _snapshot(hub: Path, repo: str, revision: str, **changes: object) -> Path:
    org, name = repo.split("/")
    folder = hub / f"models--{org}--{name}" / "snapshots" / revision
    folder.mkdir(parents=True)
    config = {**json.loads(REAL_CONFIG.read_text()), **changes}
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


def test_found_under_hf_home_and_equal_to_the_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    config = _snapshot(tmp_path / "hf" / "hub", NAME, "abc123")
    spec = load_model("testorg/tiny-oss")
    direct = load_model(str(REAL_CONFIG))
    assert spec.source == str(config) and spec.name == "testorg/tiny-oss"
    assert spec.params.total == direct.params.total and spec.n_layers == direct.n_layers == 24


def test_default_cache_under_home_and_a_bare_name() -> None:
    home = Path(os.environ["HOME"])
    _snapshot(home / ".cache" / "huggingface" / "hub", NAME, "r1")
    assert load_model("tiny-oss").n_layers == 24


def test_refs_main_picks_the_snapshot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    pinned = _snapshot(hub, NAME, "old", vocab_size=1000)
    newer = _snapshot(hub, NAME, "new", vocab_size=2000)
    os.utime(pinned, (1, 1))  # the unpinned snapshot is the newest
    assert load_model(NAME).source == str(newer)
    (hub / "models--Testorg--Tiny-OSS" / "refs").mkdir()
    (hub / "models--Testorg--Tiny-OSS" / "refs" / "main").write_text("old")
    load_model.cache_clear()
    spec = load_model(NAME)
    assert spec.source == str(pinned)
    assert spec.params.total < load_model(str(newer)).params.total  # a smaller vocabulary: fewer embeddings


def test_hf_hub_cache_wins_over_hf_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home_hf"))
    first = _snapshot(tmp_path / "explicit", NAME, "a")
    _snapshot(tmp_path / "home_hf" / "hub", NAME, "b")
    assert load_model(NAME).source == str(first)


def test_bundled_names_come_before_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _snapshot(tmp_path / "hub", "openai/gpt-oss-20b", "x", vocab_size=10)
    assert load_model("openai/gpt-oss-20b").source.startswith("bundled:")


def test_ambiguous_bare_name_and_missing_model_say_how_to_fetch(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _snapshot(tmp_path / "hub", "a/same-name", "1")
    _snapshot(tmp_path / "hub", "b/same-name", "1")
    with pytest.raises(UnknownName, match=r"huggingface-cli download ORG/same-name config\.json"):
        load_model("same-name")
    assert load_model("b/same-name").n_layers == 24
    result = CliRunner().invoke(main, ["model", "--model", "acme/not-cached-7b", "--gpu", "h100_sxm"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert "huggingface-cli download acme/not-cached-7b config.json" in line and str(tmp_path / "hub") in line
