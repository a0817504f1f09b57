"""Model specs straight from a Hugging Face config.json: layer layout, per-part parameter counts, KV/state size.

What it does: reads a bundled config (short name or HF id, see data/models/aliases.toml) or a path to a
config.json; unwraps multimodal wrappers (`text_config`); recognises dense GQA/MQA, MoE (routed + shared experts,
`first_k_dense_replace`, `mlp_only_layers`, `decoder_sparse_step`), MLA (`kv_lora_rank` ...), DeepSeek sparse
attention (indexer, `index_topk`), sliding-window / hybrid layers (`layer_types`, Qwen3.5 linear attention,
Nemotron-H Mamba-2 via `hybrid_override_pattern`), DeepSeek-V4 compressed attention (approximate), MTP layers.
Vision towers are counted for memory only (`ParamCounts.vision`, specs/vision.py; they do not run in a text decode
step). What it does not: biases and tiny tensors beyond norms/router (a few parts per million).
The records are specs.model_spec's (ModelSpec, ParamCounts) and the parsing specs.model_config's (parse_config, with
the parameter formulas); this module finds and reads the config (bundled name or HF id, a path, the local Hugging
Face cache, NVFP4 repacks) and re-exports those names.
"""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from servescope._paths import is_device
from servescope.errors import BadConfig, UnknownName
from servescope.specs import hf_cache, tables
from servescope.specs import quant as q
from servescope.specs.model_config import (
    GDN_CHUNK,
    MAMBA_CHUNK_DEFAULT,
    MAX_CONFIG_INT,
    MAX_LAYERS,
    parse_config,
)
from servescope.specs.model_spec import ModelSpec, ParamCounts

# re-exported: callers import the records and the parser from here
__all__ = ["GDN_CHUNK", "MAMBA_CHUNK_DEFAULT", "MAX_CONFIG_BYTES", "MAX_CONFIG_INT", "MAX_LAYERS", "ModelSpec",
           "ParamCounts", "list_models", "load_model", "parse_config"]


# ---------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _aliases() -> dict[str, Any]:
    """Names -> bundled file stems: every `<org>--<model>_config.json` answers to `org/model` and, when unique,
    to `model` (lower case); aliases.toml adds more names and the NVFP4 repacks that are not bundled."""
    root = tables.DATA / "models"
    table = tomllib.loads(root.joinpath("aliases.toml").read_text(encoding="utf-8"))
    stems = sorted(f.name[: -len("_config.json")] for f in root.iterdir()
                   if f.name.endswith("_config.json") and not f.name.endswith("_hf_quant_config.json"))
    auto: dict[str, str] = {}
    shorts: dict[str, list[str]] = {}
    for stem in stems:
        org, _, model = stem.partition("--")
        auto[f"{org}/{model}".lower()] = stem
        shorts.setdefault(model.lower(), []).append(stem)
    auto.update({k: v[0] for k, v in shorts.items() if len(v) == 1 and k not in auto})
    auto.update(table.get("aliases", {}))
    return {"aliases": auto, "repacks": table.get("repacks", {})}


def _closest(key: str, known: list[str]) -> str:
    """`did you mean …` for the nearest names, and how to list them all: a full list is too long for one line."""
    import difflib  # only for an unknown name (~1 ms of imports every command would pay)

    near = difflib.get_close_matches(key, known, n=5, cutoff=0.4)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return f"{hint}({len(known)} known: `servescope specs list`)"


def list_models() -> list[str]:
    """Bundled short names (and HF ids) load_model accepts."""
    a = _aliases()
    return sorted(set(a["aliases"]) | set(a.get("repacks", {})))


MAX_CONFIG_BYTES = 64 << 20  # the largest real config.json / hf_quant_config.json is well under 1 MB


def _read_text(path: Path) -> str:
    if is_device(path):
        raise BadConfig(f"{path}: a device, not a config file")
    try:
        with path.open("rb") as f:  # at most one byte past the ceiling: a pipe or a huge file is not read whole
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise BadConfig(f"{path}: over {MAX_CONFIG_BYTES >> 20} MB, not a model config")
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadConfig(f"{path}: not a text file (invalid UTF-8)") from None
    except OSError as e:
        raise BadConfig(f"{path}: cannot be read ({e.strerror or e})") from None


def _read_json(text: str, path: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadConfig(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:  # the json module recurses once per nesting level (the trace loader guards the same)
        raise BadConfig(f"{path}: JSON nested too deeply to read (over ~1,000 levels); not a model config") from None
    except ValueError as e:  # an integer of over 4,300 digits (int conversion limit); never a model config
        raise BadConfig(f"{path}: not a model config ({str(e).split(';')[0]})") from None
    if not isinstance(data, dict):
        raise BadConfig(f"{path}: top level is not a JSON object")
    return data


def _bundled(stem: str) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    root = tables.DATA / "models"
    cfg_file = root.joinpath(f"{stem}_config.json")
    cfg = _read_json(cfg_file.read_text(encoding="utf-8"), f"bundled:{stem}_config.json")
    qf = root.joinpath(f"{stem}_hf_quant_config.json")
    hq = _read_json(qf.read_text(encoding="utf-8"), str(qf)) if qf.is_file() else None
    return cfg, f"bundled:{stem}_config.json", hq


def _from_path(p: Path, name: str) -> ModelSpec:
    hq_path = p.with_name(p.name.replace("config.json", "hf_quant_config.json"))
    hq = _read_json(_read_text(hq_path), str(hq_path)) if hq_path != p and hq_path.is_file() else None
    return parse_config(_read_json(_read_text(p), str(p)), name, str(p), hq)


@lru_cache(maxsize=64)
def load_model(name_or_path: str) -> ModelSpec:
    """A path to a config.json (or its folder), a bundled short name / HF id (case-insensitive), or an HF id in
    the local Hugging Face cache (specs.hf_cache), in that order."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.is_file():
        if not p.is_file():
            raise BadConfig(f"{p}: no such config file")
        return _from_path(p, p.stem)
    key = name_or_path.strip().lower()
    a = _aliases()
    if key in a.get("repacks", {}):
        rp = a["repacks"][key]
        cfg, src, _ = _bundled(rp["base"])
        spec = parse_config(cfg, name_or_path, f"{src} (+{rp['quant']} repack)")
        return _requant(spec, rp["quant"])
    stem = a["aliases"].get(key)
    if stem is None:
        cached = hf_cache.find_cached_config(name_or_path)
        if cached is not None:
            return _from_path(cached, name_or_path)
        raise UnknownName(f"unknown model {name_or_path!r}: not bundled, {hf_cache.fetch_hint(name_or_path)}; "
                          f"{_closest(key, list_models())}")
    cfg, src, hq = _bundled(stem)
    spec = parse_config(cfg, name_or_path, src, hq)
    if stem.lower().endswith("-nvfp4") and spec.native_quant.experts.name == "bf16":
        # Some NVIDIA NVFP4 repacks ship config.json without their quantization block (e.g. Kimi-K2.5-NVFP4):
        # the name is the only record of the format.
        spec = _requant(spec, "nvfp4")
    return spec


def _requant(spec: ModelSpec, scheme_name: str) -> ModelSpec:
    """NVFP4 repack: MLPs/experts in the scheme, attention fp8, lm_head bf16, fp8 KV (modelopt defaults)."""
    s = q.scheme(scheme_name)
    nq = q.QuantConfig(q.SCHEMES["fp8"], s, s, s, q.SCHEMES["bf16"], q.SCHEMES["fp8"], "kv_cache_quant_algo")
    return ModelSpec(**{**spec.__dict__, "native_quant": nq})
