"""The config.json reader (specs/models.py) refuses what no real model has, naming the field, and guards nesting
and size like the trace loader — while every bundled and shared config still loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.errors import BadConfig
from servescope.specs.models import MAX_CONFIG_BYTES, list_models, load_model

ROOT = Path(__file__).parents[2]
BUNDLED = ROOT / "src/servescope/specs/data/models"
SHARED = ROOT.parent / "shared" / "models"
BASE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 1000}


def _configs() -> list[Path]:
    found = [*sorted(BUNDLED.glob("*config.json")), *sorted(SHARED.glob("*config.json"))]
    return [p for p in found if not p.name.endswith("hf_quant_config.json")]


def test_every_bundled_and_shared_config_still_loads() -> None:
    paths = _configs()
    assert len(paths) >= 50
    for p in paths:  # by path: the checks run on the file as shipped (its hf_quant_config.json beside it)
        assert load_model(str(p)).n_layers > 0, p
    for name in list_models():
        assert load_model(name).n_layers > 0, name


def _write(tmp_path: Path, cfg: dict[str, object]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(("patch", "message"), [
    ({"head_dim": 0}, "head_dim is 0"),
    ({"hidden_size": 2, "num_attention_heads": 4, "num_key_value_heads": 4}, r"head_dim is 0 \(hidden_size 2 //"),
    ({"intermediate_size": -8}, r"intermediate_size is negative \(-8\)"),
    ({"hidden_size": True}, r"hidden_size is a boolean \(true\), not a count"),
    ({"num_hidden_layers": False}, r"num_hidden_layers is a boolean \(false\), not a count"),
    ({"num_key_value_heads": 3}, "num_key_value_heads 3 does not divide num_attention_heads 4"),
    ({"num_key_value_heads": 8}, "num_key_value_heads 8 does not divide num_attention_heads 4"),
    ({"n_embd": -1, "hidden_size": None}, r"n_embd is negative"),  # the field named is the one present
])
def test_configs_no_real_model_has_are_refused_naming_the_field(tmp_path: Path, patch: dict[str, object],
                                                                 message: str) -> None:
    path = _write(tmp_path, {**BASE, **patch})
    with pytest.raises(BadConfig, match=message):
        load_model(path)
    result = CliRunner().invoke(main, ["model", "--model", path, "--gpu", "h100_sxm"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "config.json" in result.stderr


def test_32_query_heads_with_3_kv_heads(tmp_path: Path) -> None:
    cfg = {**BASE, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 3}
    with pytest.raises(BadConfig, match="num_key_value_heads 3 does not divide num_attention_heads 32"):
        load_model(_write(tmp_path, cfg))


@pytest.mark.parametrize("command", [["model"], ["simulate", "--concurrency", "1", "--num-prompts", "2"], ["sweep"]])
def test_deeply_nested_config_is_one_line(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 2, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = CliRunner().invoke(main, [*command, "--model", str(path), "--gpu", "h100_sxm"])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"servescope: {path}: JSON nested too deeply to read (over ~1,000 levels); " \
                            "not a model config\n"


def test_oversized_config_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with path.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 10)  # sparse: no disk used
    with pytest.raises(BadConfig, match=r"config.json: over 64 MB, not a model config"):
        load_model(str(path))
