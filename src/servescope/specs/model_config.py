"""A ModelSpec from a parsed Hugging Face config.json (`parse_config`): the sizes, the per-layer attention and MLP
layout (Nemotron-H patterns, `layer_types`, per-layer MoE flags, `first_k_dense_replace`, `mlp_only_layers`,
`decoder_sparse_step`), the attention kind (GQA/MQA, MLA(+DSA indexer), DeepSeek-V4 compressed), linear-attention
and Mamba-2 layers, MTP layers, and the parameter counts per part; a bad field is refused naming the file and the
field (BadConfig).
Does not: find or read a config file, resolve a model name or repack a checkpoint (specs.models), or price
anything.

Parameter formulas (per layer; h = hidden, nh/nkv heads, d head_dim):
  GQA attention  h·nh·d (q) + 2·h·nkv·d (k, v) + nh·d·h (o)
  MLA attention  h·q_lora + q_lora + q_lora·nh·(nope+rope) + h·(kv_lora+rope) + kv_lora + kv_lora·nh·(nope+v)
                 + nh·v·h   (without q_lora: h·nh·(nope+rope));  DSA indexer adds q_lora·ih·id + h·id + h·ih
  gated MLP      3·h·inter;   router h·E;   norms 2·h per layer + h final;  embeddings vocab·h (×2 untied)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from servescope.errors import BadConfig
from servescope.specs import quant as q
from servescope.specs.model_spec import ModelSpec, ParamCounts
from servescope.specs.vision import vision_params


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
    dm = _experts(c, path, _dims(c, path))
    attn_layers = _layer_attention(c, path, dm.n)
    dm = replace(dm, n=len(attn_layers))
    mlp_layers = _layer_mlp(c, path, dm.n, dm.n_exp)
    if len(mlp_layers) != dm.n:
        raise BadConfig(f"{path}: layer pattern lengths disagree")
    kind = "mla" if _int(c, path, "kv_lora_rank") else ("v4" if c.get("compress_ratios") is not None else "gqa")
    if kind == "v4":
        dm = replace(dm, nkv=1)
    params, state, lin_dims = _param_counts(c, outer, path, dm, attn_layers, mlp_layers)
    n_mtp = _int(c, path, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules", default=0)
    per_layer_main = (params.total - params.embedding - params.lm_head - dm.h) / dm.n
    params = _with_mtp(params, n_mtp, per_layer_main, dm.h)
    return _model_spec(c, outer, name, path, hf_quant, dm, kind, (attn_layers, mlp_layers), params, state,
                       lin_dims, n_mtp)


@dataclass(frozen=True)
class _Dims:
    """The sizes a spec is built from (module docstring's symbols): layers n, hidden h, vocabulary, heads nh and
    nkv, head_dim d; routed experts, experts per token and the dense, expert and shared-expert MLP widths."""

    n: int
    h: int
    vocab: int
    nh: int
    nkv: int
    d: int
    n_exp: int = 0
    top_k: int = 0
    inter: int = 0
    moe_inter: int = 0
    shared_inter: int = 0


def _dims(c: dict[str, Any], path: str) -> _Dims:
    """Layers, hidden size, vocabulary, heads and head_dim, each checked (BadConfig naming the field)."""
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
    return _Dims(n, h, vocab, nh, nkv, d)


def _experts(c: dict[str, Any], path: str, dm: _Dims) -> _Dims:
    """`dm` with the routed experts, experts per token and the dense, expert and shared-expert MLP widths."""
    h = dm.h
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
    return replace(dm, n_exp=n_exp, top_k=top_k, inter=inter, moe_inter=moe_inter, shared_inter=shared_inter)


def _param_counts(c: dict[str, Any], outer: dict[str, Any], path: str, dm: _Dims, attn_layers: tuple[str, ...],
                  mlp_layers: tuple[str, ...]) -> tuple[ParamCounts, int, tuple[int, ...]]:
    """Parameters per part without MTP layers (module docstring's formulas), and the recurrent state elements and
    linear_dims of a linear-attention or Mamba-2 layer (0 and () without one)."""
    h, n = dm.h, dm.n
    attn_p, attn_repl = _attention_params(c, path, h, dm.nh, dm.nkv, dm.d)
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
    per_expert = mats * (latent or h) * dm.moe_inter
    latent_proj = 2.0 * h * latent if latent else 0.0  # h -> latent -> h per MoE layer, always active
    tied = bool(_get(c, path, "tie_word_embeddings", default=_get(outer, path, "tie_word_embeddings", default=False)))
    params = ParamCounts(
        attention=attn_p * n_full + lin_p * n_lin,
        attention_replicated=attn_repl * n_full,
        dense_mlp=mats * h * dm.inter * n_dense,
        routed_experts=per_expert * dm.n_exp * n_moe,
        shared_experts=(mats * h * dm.shared_inter + latent_proj) * n_moe,
        embedding=float(dm.vocab * h),
        lm_head=0.0 if tied else float(dm.vocab * h),
        other=float(2 * h * n + h),
        mtp=0.0,
        per_expert=per_expert,
        router=float(h * dm.n_exp * n_moe),
        vision=vision_params(outer, h),
    )
    return params, state, lin_dims


def _model_spec(c: dict[str, Any], outer: dict[str, Any], name: str, path: str, hf_quant: dict[str, Any] | None,
                dm: _Dims, kind: str, layers: tuple[tuple[str, ...], tuple[str, ...]], params: ParamCounts,
                state: int, lin_dims: tuple[int, ...], n_mtp: int) -> ModelSpec:
    """The spec: the sizes `dm`, the per-layer layout `layers` (attention, MLP), the parameter counts, and the
    MLA, DSA-indexer, sliding-window, DeepSeek-V4 and quantization fields read from the config."""
    cr = c.get("compress_ratios")
    return ModelSpec(
        name=name, source=path, model_type=str(c.get("model_type", outer.get("model_type", "?"))),
        n_layers=dm.n, hidden_size=dm.h, vocab_size=dm.vocab, n_heads=dm.nh, n_kv_heads=dm.nkv, head_dim=dm.d,
        attention_kind=kind, layer_attention=layers[0], layer_mlp=layers[1],
        intermediate_size=dm.inter, moe_intermediate_size=dm.moe_inter, n_routed_experts=dm.n_exp, top_k=dm.top_k,
        shared_intermediate_size=dm.shared_inter, sliding_window=_int(c, path, "sliding_window", default=0),
        q_lora_rank=_int(c, path, "q_lora_rank"), kv_lora_rank=_int(c, path, "kv_lora_rank"),
        qk_nope_head_dim=_int(c, path, "qk_nope_head_dim"), qk_rope_head_dim=_int(c, path, "qk_rope_head_dim"),
        v_head_dim=_int(c, path, "v_head_dim", default=_int(c, path, "qk_nope_head_dim")),
        index_topk=_int(c, path, "index_topk"), index_n_heads=_int(c, path, "index_n_heads"),
        index_head_dim=_int(c, path, "index_head_dim"), n_mtp_layers=n_mtp, linear_state_elems=state,
        linear_dims=lin_dims,
        v4_compress=tuple(int(x) for x in cr[:dm.n]) if isinstance(cr, list) else (),
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
