"""Model specs straight from a Hugging Face config.json: layer layout, per-part parameter counts, KV/state size.

What it does: reads a bundled config (short name or HF id, see data/models/aliases.toml) or a path to a
config.json; unwraps multimodal wrappers (`text_config`); recognises dense GQA/MQA, MoE (routed + shared experts,
`first_k_dense_replace`, `mlp_only_layers`, `decoder_sparse_step`), MLA (`kv_lora_rank` ...), DeepSeek sparse
attention (indexer, `index_topk`), sliding-window / hybrid layers (`layer_types`, Qwen3.5 linear attention,
Nemotron-H Mamba-2 via `hybrid_override_pattern`), DeepSeek-V4 compressed attention (approximate), MTP layers.
Vision towers are counted for memory only (`ParamCounts.vision`, specs/vision.py; they do not run in a text decode
step). What it does not: biases and tiny tensors beyond norms/router (a few parts per million).

Parameter formulas (per layer; h = hidden, nh/nkv heads, d head_dim):
  GQA attention  h·nh·d (q) + 2·h·nkv·d (k, v) + nh·d·h (o)
  MLA attention  h·q_lora + q_lora + q_lora·nh·(nope+rope) + h·(kv_lora+rope) + kv_lora + kv_lora·nh·(nope+v)
                 + nh·v·h   (without q_lora: h·nh·(nope+rope));  DSA indexer adds q_lora·ih·id + h·id + h·ih
  gated MLP      3·h·inter;   router h·E;   norms 2·h per layer + h final;  embeddings vocab·h (×2 untied)
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from servescope._paths import is_device
from servescope.errors import BadConfig, UnknownName
from servescope.specs import hf_cache
from servescope.specs import quant as q
from servescope.specs.vision import vision_params

_PKG = "servescope.specs"


@dataclass(frozen=True)
class ParamCounts:
    """Parameters per part, whole model (all layers). `routed_experts` counts every expert."""

    attention: float
    attention_replicated: float  # part of `attention` every TP rank holds whole (MLA q_a/kv_a, indexer)
    dense_mlp: float
    routed_experts: float
    shared_experts: float
    embedding: float
    lm_head: float
    other: float  # norms
    mtp: float  # next-token-prediction layers (not in `total`)
    per_expert: float  # one routed expert of one layer: 3·h·moe_inter
    router: float = 0.0  # MoE router (gate) weights, h·E per MoE layer: read every step, replicated on every rank
    vision: float = 0.0  # vision tower + projector of a multimodal checkpoint (memory only, not in `total`)

    @property
    def total(self) -> float:
        return (
            self.attention + self.dense_mlp + self.routed_experts + self.shared_experts
            + self.embedding + self.lm_head + self.other + self.router
        )


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers of one model; counts in elements, sizes derived. Frozen, hashable."""

    name: str
    source: str
    model_type: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    attention_kind: str  # "gqa" | "mla" | "v4"
    layer_attention: tuple[str, ...]  # per layer: full | sliding | linear | mamba | none
    layer_mlp: tuple[str, ...]  # per layer: dense | moe | none
    intermediate_size: int
    moe_intermediate_size: int
    n_routed_experts: int
    top_k: int
    shared_intermediate_size: int  # total over shared experts (0 if none)
    sliding_window: int
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    n_mtp_layers: int = 0
    linear_state_elems: int = 0  # recurrent state per linear/mamba layer per sequence (fp32 elements)
    # (heads, state rows, state columns, scan chunk) of a linear/mamba layer: gated delta-net (value heads, key dim,
    # value dim, 64) or Mamba-2 (heads, d_state, head_dim, chunk_size); () when the model has none
    linear_dims: tuple[int, ...] = ()
    v4_compress: tuple[int, ...] = ()  # DeepSeek-V4 compress ratio per layer (0 = sliding only)
    params: ParamCounts = field(default=None)  # type: ignore[assignment]
    native_quant: q.QuantConfig = field(default=None)  # type: ignore[assignment]

    # --- derived counts -------------------------------------------------------------------------
    @property
    def n_moe_layers(self) -> int:
        return sum(1 for m in self.layer_mlp if m == "moe")

    @property
    def n_dense_layers(self) -> int:
        return sum(1 for m in self.layer_mlp if m == "dense")

    def n_attn(self, kind: str) -> int:
        return sum(1 for a in self.layer_attention if a == kind)

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def active_params(self) -> float:
        """Parameters touched per token (top-k routed experts, all else), lm_head included, embedding not."""
        p = self.params
        routed = self.n_moe_layers * self.top_k * p.per_expert
        return p.attention + p.dense_mlp + routed + p.shared_experts + p.lm_head + p.other

    def kv_elems_per_token_layer(self) -> int:
        """KV-cache elements one token stores in one full-attention layer, whole model (before TP split)."""
        if self.attention_kind == "mla":
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.attention_kind == "v4":
            return self.head_dim  # one shared KV head (MQA-like latent)
        return 2 * self.n_kv_heads * self.head_dim

    def __repr__(self) -> str:
        return f"ModelSpec({self.name!r}: {self.model_type}, {self.n_layers} layers; {self.source!r})"


# ---------------------------------------------------------------------------------------------------
def _get(cfg: dict[str, Any], path: str, *keys: str, default: Any = None, required: bool = False) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    if required:
        raise BadConfig(f"{path}: missing {' or '.join(keys)}")
    return default


MAX_LAYERS = 100_000
MAX_CONFIG_INT = 2**53  # beyond this an integer in a config.json is damage (and overflows NumPy's int64 math)


def _int(cfg: dict[str, Any], path: str, *keys: str, default: int = 0, required: bool = False) -> int:
    """A count or size: an integer (or integral number / numeric string) in 0..MAX_CONFIG_INT. A boolean or a
    negative value is refused naming the field: no real model has `hidden_size: true` or a size of -8."""
    v = _get(cfg, path, *keys, default=default, required=required)
    key = next((k for k in keys if cfg.get(k) is not None), keys[0])
    if isinstance(v, bool):  # int(True) is 1: a boolean would pass as a count
        raise BadConfig(f"{path}: {key} is a boolean ({json.dumps(v)}), not a count")
    try:
        if abs(int(v)) > MAX_CONFIG_INT:
            raise ValueError(v)
        n = int(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity in the JSON
        raise BadConfig(f"{path}: {key} is not an integer ({v!r})") from None
    if n < 0:
        raise BadConfig(f"{path}: {key} is negative ({n}); sizes and counts are >= 0")
    return n


_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear",
                "deepseek_sparse_attention": "full", "chunked_attention": "sliding"}


def _pattern(cfg: dict[str, Any]) -> str | None:
    """Nemotron-H block pattern (M mamba, * attention, - MLP, E MoE; one block per layer), from
    `hybrid_override_pattern` or a `layers_block_type` list."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return pattern
    blocks = cfg.get("layers_block_type")
    if isinstance(blocks, list) and all(b in _BLOCKS for b in blocks):
        return "".join(_BLOCKS[b] for b in blocks)
    return None


def _layer_attention(cfg: dict[str, Any], path: str, n: int) -> tuple[str, ...]:
    pattern = _pattern(cfg)
    if pattern is not None:
        return tuple({"M": "mamba", "*": "full"}.get(c, "none") for c in pattern)
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != n:
            raise BadConfig(f"{path}: layer_types has {len(types)} entries for {n} layers")
        known = _LAYER_TYPES
        out = []
        for t in types:
            if t not in known:
                raise BadConfig(f"{path}: unsupported layer type {t!r} (known: {', '.join(known)})")
            out.append(known[t])
        return tuple(out)
    if cfg.get("compress_ratios") is not None:
        return ("full",) * n
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", False):
        return ("sliding",) * n
    return ("full",) * n


def _layer_mlp(cfg: dict[str, Any], path: str, n: int, n_experts: int) -> tuple[str, ...]:
    pattern = _pattern(cfg)
    if pattern is not None:
        return tuple({"-": "dense", "E": "moe"}.get(c, "none") for c in pattern)
    if n_experts == 0:
        return ("dense",) * n
    flags = next((cfg[k] for k in ("decoder_sparse_step", "moe_layer_freq") if isinstance(cfg.get(k), list)), None)
    if flags is not None:  # per-layer 0/1 list (MiniMax-M3, MiMo-V2)
        if len(flags) != n:
            raise BadConfig(f"{path}: per-layer MoE flags have {len(flags)} entries for {n} layers")
        return tuple("moe" if f else "dense" for f in flags)
    first_dense = _int(cfg, path, "first_k_dense_replace", default=0)
    step = _int(cfg, path, "decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step", default=1) or 1
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    out = []
    for i in range(n):
        dense = i < first_dense or i in mlp_only or (i + 1) % step != 0
        out.append("dense" if dense else "moe")
    return tuple(out)


def _attention_params(c: dict[str, Any], path: str, h: int, nh: int, nkv: int, d: int) -> tuple[float, float]:
    """(params per full-attention layer, replicated part) for GQA, MLA(+DSA) or DeepSeek-V4 attention."""
    ql = _int(c, path, "q_lora_rank")
    if _int(c, path, "kv_lora_rank"):
        kvl, nope, rope = (_int(c, path, k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"))
        v = _int(c, path, "v_head_dim", default=nope)
        q_in = (h * ql + ql + ql * nh * (nope + rope)) if ql else h * nh * (nope + rope)
        kv = h * (kvl + rope) + kvl + kvl * nh * (nope + v)
        repl = (h * ql + ql if ql else 0) + h * (kvl + rope) + kvl
        ih, idim = _int(c, path, "index_n_heads"), _int(c, path, "index_head_dim")
        indexer = (ql * ih * idim + h * idim + h * ih) if ih else 0
        return float(q_in + kv + nh * v * h + indexer), float(repl + indexer)
    if c.get("compress_ratios") is not None:  # DeepSeek-V4: low-rank q, one KV head, grouped low-rank output
        ol, og = _int(c, path, "o_lora_rank"), _int(c, path, "o_groups", default=1)
        qp = h * ql + ql * nh * d
        op = (nh * d // og) * ol * og + og * ol * h
        return float(qp + h * d + op), float(h * ql + h * d)
    return float(h * nh * d + 2 * h * nkv * d + nh * d * h), 0.0


# Chunk length of the chunked gated-delta-rule scan: vLLM 0.19's FLA kernels (vllm/model_executor/layers/fla/ops/
# chunk.py `chunk_local_cumsum(g, chunk_size=64)`, chunk_delta_h.py `chunk_size: int = 64`).
GDN_CHUNK = 64
MAMBA_CHUNK_DEFAULT = 256  # HF Mamba2Config / NemotronHConfig default `chunk_size` when a config omits it


def _linear_params(c: dict[str, Any], path: str, h: int,
                   kind: str) -> tuple[float, int, tuple[int, int, int, int]]:
    """(params, recurrent state elements, linear_dims) of one Qwen3.5 gated-delta-net or Nemotron-H Mamba-2
    layer."""
    if kind == "linear":
        nk, nv = _int(c, path, "linear_num_key_heads"), _int(c, path, "linear_num_value_heads")
        dk, dv = _int(c, path, "linear_key_head_dim"), _int(c, path, "linear_value_head_dim")
        conv_dim = 2 * nk * dk + nv * dv
        kern = _int(c, path, "linear_conv_kernel_dim", default=4)
        p = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + conv_dim * kern + nv * dv * h
        return float(p), nv * dk * dv + conv_dim * (kern - 1), (nv, dk, dv, GDN_CHUNK)
    nheads, hd = _int(c, path, "mamba_num_heads"), _int(c, path, "mamba_head_dim")
    ds, ng = _int(c, path, "ssm_state_size"), _int(c, path, "n_groups", default=1)
    kern = _int(c, path, "conv_kernel", default=4)
    d_inner = nheads * hd
    conv_dim = d_inner + 2 * ng * ds
    p = h * (2 * d_inner + 2 * ng * ds + nheads) + conv_dim * kern + d_inner * h
    chunk = _int(c, path, "chunk_size", default=MAMBA_CHUNK_DEFAULT)
    return float(p), nheads * hd * ds + conv_dim * (kern - 1), (nheads, ds, hd, chunk)


def parse_config(cfg: dict[str, Any], name: str, path: str, hf_quant: dict[str, Any] | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (multimodal wrappers unwrapped via `text_config`)."""
    outer = cfg
    c = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    assert isinstance(c, dict)
    pattern = _pattern(c)
    n = len(pattern) if pattern is not None else _int(c, path, "num_hidden_layers", "n_layer", "num_layers",
                                                     required=True)
    h = _int(c, path, "hidden_size", "d_model", "n_embd", required=True)
    vocab = _int(c, path, "vocab_size", required=True)
    nh = _int(c, path, "num_attention_heads", "n_head", required=True)
    if n <= 0 or h <= 0 or nh <= 0 or vocab <= 0:
        raise BadConfig(f"{path}: non-positive layer/hidden/head/vocab count")
    if n > MAX_LAYERS:  # a per-layer tuple is built below; 10**30 layers is damage, not a model
        raise BadConfig(f"{path}: {n} layers is beyond any model (> {MAX_LAYERS:,})")
    nkv = _int(c, path, "num_key_value_heads", default=nh) or nh
    if nh % nkv:
        raise BadConfig(f"{path}: num_key_value_heads {nkv} does not divide num_attention_heads {nh} (each KV head "
                        "serves a whole group of query heads)")
    d = _int(c, path, "head_dim", "attention_head_dim", default=h // nh)
    if d == 0:
        given = c.get("head_dim", c.get("attention_head_dim"))
        raise BadConfig(f"{path}: head_dim is 0" + ("" if given is not None else
                                                     f" (hidden_size {h} // num_attention_heads {nh})"))
    n_exp = _int(c, path, "n_routed_experts", "num_experts", "num_local_experts", default=0)
    top_k = _int(c, path, "num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts",
                 "moe_topk", default=0)
    inter = _int(c, path, "intermediate_size_mlp", "intermediate_size", "ffn_hidden_size", default=4 * h)
    moe_inter = _int(c, path, "moe_intermediate_size", "routed_expert_hidden_size", "expert_intermediate_size",
                     "intermediate_size", default=inter if n_exp else 0)
    n_shared = _int(c, path, "n_shared_experts", "num_shared_experts", default=0)
    if n_exp and not 0 < top_k <= n_exp:
        raise BadConfig(f"{path}: {top_k} experts per token with {n_exp} routed experts")
    shared_inter = _int(c, path, "shared_expert_intermediate_size", "shared_intermediate_size",
                        "moe_shared_expert_intermediate_size", default=0)
    if n_shared and not shared_inter:
        shared_inter = n_shared * moe_inter
    attn_layers = _layer_attention(c, path, n)
    n = len(attn_layers)
    mlp_layers = _layer_mlp(c, path, n, n_exp)
    if len(mlp_layers) != n:
        raise BadConfig(f"{path}: layer pattern lengths disagree")
    kind = "mla" if _int(c, path, "kv_lora_rank") else ("v4" if c.get("compress_ratios") is not None else "gqa")
    if kind == "v4":
        nkv = 1
    attn_p, attn_repl = _attention_params(c, path, h, nh, nkv, d)
    lin_p, state, lin_dims = 0.0, 0, tuple[int, ...]()
    for k in ("linear", "mamba"):
        if k in attn_layers:
            lin_p, state, lin_dims = _linear_params(c, path, h, k)
    n_full = sum(1 for a in attn_layers if a in ("full", "sliding"))
    n_lin = sum(1 for a in attn_layers if a in ("linear", "mamba"))
    n_moe = sum(1 for m in mlp_layers if m == "moe")
    n_dense = sum(1 for m in mlp_layers if m == "dense")
    mats = _mlp_mats(c)
    latent = _int(c, path, "moe_latent_size")  # Nemotron-3 latent MoE: experts work in a smaller space
    per_expert = mats * (latent or h) * moe_inter
    latent_proj = 2.0 * h * latent if latent else 0.0  # h -> latent -> h per MoE layer, always active
    tied = bool(_get(c, path, "tie_word_embeddings", default=_get(outer, path, "tie_word_embeddings", default=False)))
    params = ParamCounts(
        attention=attn_p * n_full + lin_p * n_lin,
        attention_replicated=attn_repl * n_full,
        dense_mlp=mats * h * inter * n_dense,
        routed_experts=per_expert * n_exp * n_moe,
        shared_experts=(mats * h * shared_inter + latent_proj) * n_moe,
        embedding=float(vocab * h),
        lm_head=0.0 if tied else float(vocab * h),
        other=float(2 * h * n + h),
        mtp=0.0,
        per_expert=per_expert,
        router=float(h * n_exp * n_moe),
        vision=vision_params(outer, h),
    )
    n_mtp = _int(c, path, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", default=0)
    per_layer_main = (params.total - params.embedding - params.lm_head - h) / n
    params = _with_mtp(params, n_mtp, per_layer_main, h)
    cr = c.get("compress_ratios")
    return ModelSpec(
        name=name, source=path, model_type=str(c.get("model_type", outer.get("model_type", "?"))),
        n_layers=n, hidden_size=h, vocab_size=vocab, n_heads=nh, n_kv_heads=nkv, head_dim=d,
        attention_kind=kind, layer_attention=attn_layers, layer_mlp=mlp_layers,
        intermediate_size=inter, moe_intermediate_size=moe_inter, n_routed_experts=n_exp, top_k=top_k,
        shared_intermediate_size=shared_inter, sliding_window=_int(c, path, "sliding_window", default=0),
        q_lora_rank=_int(c, path, "q_lora_rank"), kv_lora_rank=_int(c, path, "kv_lora_rank"),
        qk_nope_head_dim=_int(c, path, "qk_nope_head_dim"), qk_rope_head_dim=_int(c, path, "qk_rope_head_dim"),
        v_head_dim=_int(c, path, "v_head_dim", default=_int(c, path, "qk_nope_head_dim")),
        index_topk=_int(c, path, "index_topk"), index_n_heads=_int(c, path, "index_n_heads"),
        index_head_dim=_int(c, path, "index_head_dim"), n_mtp_layers=n_mtp, linear_state_elems=state,
        linear_dims=lin_dims,
        v4_compress=tuple(int(x) for x in cr[:n]) if isinstance(cr, list) else (),
        params=params, native_quant=q.from_hf(c, path, hf_quant),
    )


def _mlp_mats(c: dict[str, Any]) -> float:
    """Weight matrices of a dense MLP: 3 when gated (SwiGLU), 2 for relu2/gelu MLPs (Nemotron-H)."""
    act = str(c.get("mlp_hidden_act", "")).lower()
    return 2.0 if act in ("relu2", "gelu") else 3.0


def _with_mtp(p: ParamCounts, n_mtp: int, per_layer: float, h: int) -> ParamCounts:
    """MTP modules: one decoder layer + a 2h->h projection each (embedding and head shared with the main model)."""
    if not n_mtp:
        return p
    return ParamCounts(**{**p.__dict__, "mtp": n_mtp * (per_layer + 2.0 * h * h)})


# ---------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _aliases() -> dict[str, Any]:
    """Names -> bundled file stems: every `<org>--<model>_config.json` answers to `org/model` and, when unique,
    to `model` (lower case); aliases.toml adds more names and the NVFP4 repacks that are not bundled."""
    root = resources.files(_PKG).joinpath("data", "models")
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
    root = resources.files(_PKG).joinpath("data", "models")
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
