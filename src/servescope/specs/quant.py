"""Quantization schemes: bytes per parameter (with scale overhead) and the tensor-core dtype of the GEMM.

What it does: names the weight/KV formats servescope models (bf16, fp8, fp8-block, int4-w4a16 with group 32/128,
nvfp4, mxfp4, int8), gives each its storage cost in bytes per element including scales, and the dtype whose
tensor-core peak bounds its GEMMs; reads a checkpoint's own scheme from a Hugging Face `quantization_config`
(or NVIDIA modelopt `hf_quant_config.json`) into a per-part `QuantConfig`.
What it does not: model kernel efficiency of a format (that lives in perfmodel's fitted efficiencies).

Bytes per element (DERIVED from the formats' layouts):
  bf16/fp16 2; fp8 (per-tensor/channel scale) 1; fp8-block 128×128 with an fp32 scale 1 + 4/16384;
  int4-w4a16 group g with a bf16 scale 0.5 + 2/g (g=32: 0.5625, as hardware-and-models.md §3c);
  nvfp4 (e2m1, fp8 scale per 16) 0.5 + 1/16; mxfp4 (e2m1, e8m0 scale per 32) 0.5 + 1/32; int8 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from servescope.errors import BadConfig, UnknownName
from servescope.units import BYTES_PER_ELEMENT


@dataclass(frozen=True)
class QuantScheme:
    """One storage format. `gemm_dtype` is the key into GpuSpec.flops_per_s its GEMMs run at."""

    name: str
    bytes_per_param: float
    gemm_dtype: str  # "bf16" | "fp8" | "fp4" | "int8"
    note: str = ""


_B = {d: float(b) for d, b in BYTES_PER_ELEMENT.items()}  # element sizes (units: the one table), as floats

SCHEMES: dict[str, QuantScheme] = {
    "bf16": QuantScheme("bf16", _B["bf16"], "bf16", "16-bit weights"),
    "fp16": QuantScheme("fp16", _B["fp16"], "bf16", "16-bit weights"),
    "fp8": QuantScheme("fp8", _B["fp8"], "fp8", "e4m3, per-tensor/channel scale"),
    "fp8-block": QuantScheme("fp8-block", _B["fp8"] + _B["fp32"] / (128 * 128), "fp8", "e4m3, fp32 scale per 128x128"),
    "int4-w4a16": QuantScheme("int4-w4a16", _B["int4"] + _B["bf16"] / 32, "bf16", "Marlin W4A16, bf16 scale per 32"),
    "int4-w4a16-g128": QuantScheme(
        "int4-w4a16-g128", _B["int4"] + _B["bf16"] / 128, "bf16", "Marlin W4A16, bf16 scale per 128"
    ),
    "nvfp4": QuantScheme("nvfp4", _B["fp4"] + _B["fp8"] / 16, "fp4", "e2m1, fp8 scale per 16"),
    "mxfp4": QuantScheme("mxfp4", _B["fp4"] + _B["fp8"] / 32, "fp4", "e2m1, e8m0 scale per 32"),
    "int8": QuantScheme("int8", _B["int8"], "int8", "w8a8"),
}

# Names found in the wild (CSV columns, CLI habits) -> canonical scheme.
_ALIASES = {
    "fp8_block": "fp8-block",
    "fp8-blockwise": "fp8-block",
    "int4_wo": "int4-w4a16",
    "int4": "int4-w4a16",
    "w4a16": "int4-w4a16",
    "int4-w4a16-g32": "int4-w4a16",
    "fp4": "nvfp4",
    "bfloat16": "bf16",
    "float16": "fp16",
    "": "bf16",
}


# Aliases that pick one of several real formats: the CLI says which it picked.
_AMBIGUOUS = {"fp4": "nvfp4 (e2m1, fp8 scale per 16); pass mxfp4 for the OCP microscaling format (e8m0 per 32)",
              "int4": "int4-w4a16 (int4 weights with group scales, 16-bit activations); int4 W4A8 is not modelled"}


def alias_note(name: str | None) -> str | None:
    """What an ambiguous alias was read as (`fp4` → nvfp4), or None for a scheme named exactly."""
    return None if name is None else _AMBIGUOUS.get(name.strip().lower())


def scheme(name: str) -> QuantScheme:
    """Look up a scheme by name or alias; UnknownName lists the known ones."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in SCHEMES:
        raise UnknownName(f"unknown quantization {name!r}; known: {', '.join(sorted(SCHEMES))}")
    return SCHEMES[key]


@dataclass(frozen=True)
class QuantConfig:
    """Scheme per model part. `kv` is the KV-cache element format (bf16, fp8, nvfp4)."""

    attention: QuantScheme
    dense_mlp: QuantScheme
    experts: QuantScheme
    shared_experts: QuantScheme
    lm_head: QuantScheme
    kv: QuantScheme
    # How the checkpoint itself declares its KV cache, which engines read differently (specs/kv_cache.py):
    # "kv_cache_scheme" (compressed-tensors / llm-compressor), "kv_cache_quant_algo" (modelopt), or "" (none).
    kv_declared: str = ""

    @staticmethod
    def uniform(weights: str = "bf16", experts: str | None = None, kv: str | None = None) -> QuantConfig:
        """Same scheme for every weight part except routed experts (`experts`, default = weights).

        lm_head stays bf16 unless weights are fp8/int8 (checkpoints almost never quantize lm_head to 4 bits).
        """
        w = scheme(weights)
        e = scheme(experts) if experts else w
        head = w if w.bytes_per_param >= 1.0 else SCHEMES["bf16"]
        return QuantConfig(w, w, e, w, head, scheme(kv) if kv else SCHEMES["bf16"])

    def with_kv(self, kv: str) -> QuantConfig:
        return replace(self, kv=scheme(kv))

    def describe(self) -> str:
        return (
            f"attention={self.attention.name} dense_mlp={self.dense_mlp.name} experts={self.experts.name} "
            f"shared={self.shared_experts.name} lm_head={self.lm_head.name} kv={self.kv.name}"
        )


def _ignored(ignore: list[str], part: str) -> bool:
    """Whether a compressed-tensors/modelopt ignore list keeps `part` (attention|shared|dense|lm_head) unquantized."""
    probes = {
        "attention": ("self_attn", "attn"),
        "shared": ("shared_expert",),
        "dense": ("mlp.gate_proj", "mlp\\.(gate", "mlp.(gate"),
        "lm_head": ("lm_head",),
    }[part]
    return any(p in str(pat) for pat in ignore for p in probes)


def _compressed_tensors(q: dict[str, Any], path: str) -> QuantConfig:
    qc = _compressed_tensors_weights(q, path)
    declared = "kv_cache_scheme" if isinstance(q.get("kv_cache_scheme"), dict | str) else ""
    return replace(qc, kv_declared=declared)


def _compressed_tensors_weights(q: dict[str, Any], path: str) -> QuantConfig:
    groups = q.get("config_groups") or {}
    if not groups:
        raise BadConfig(f"{path}: compressed-tensors quantization_config without config_groups")
    w = next(iter(groups.values())).get("weights") or {}
    bits, gsize, typ = w.get("num_bits"), w.get("group_size") or 128, w.get("type", "int")
    acts = next(iter(groups.values())).get("input_activations")
    if typ == "int" and bits == 4 and not acts:
        s = SCHEMES["int4-w4a16"] if gsize <= 32 else SCHEMES["int4-w4a16-g128"]
    elif typ == "float" and bits == 8:
        s = SCHEMES["fp8"]
    elif typ == "float" and bits == 4:
        s = SCHEMES["nvfp4"]
    elif typ == "int" and bits == 8:
        s = SCHEMES["int8"]
    else:
        raise BadConfig(f"{path}: unsupported compressed-tensors weights {typ}{bits} group {gsize}")
    return _with_ignores(s, list(q.get("ignore") or []), _kv_from(q.get("kv_cache_scheme")))


def _kv_from(kv_scheme: Any) -> QuantScheme:
    if isinstance(kv_scheme, dict) and kv_scheme.get("num_bits") == 8:
        return SCHEMES["fp8"]
    if isinstance(kv_scheme, str) and "fp8" in kv_scheme.lower():
        return SCHEMES["fp8"]
    return SCHEMES["bf16"]


def _with_ignores(s: QuantScheme, ignore: list[str], kv: QuantScheme) -> QuantConfig:
    bf = SCHEMES["bf16"]
    return QuantConfig(
        attention=bf if _ignored(ignore, "attention") else s,
        dense_mlp=bf if _ignored(ignore, "dense") else s,
        experts=s,
        shared_experts=bf if _ignored(ignore, "shared") else s,
        lm_head=bf if (_ignored(ignore, "lm_head") or s.bytes_per_param < 1.0) else s,
        kv=kv,
    )


def from_hf(config: dict[str, Any], path: str, hf_quant: dict[str, Any] | None = None) -> QuantConfig:
    """The checkpoint's own scheme per part from `quantization_config` (or modelopt `hf_quant_config.json`).

    No quantization_config -> bf16 everywhere. fp8 with `weight_block_size` -> fp8-block. mxfp4 (gpt-oss) applies
    to experts only (attention, router, embeddings and lm_head are listed in modules_to_not_convert).
    """
    if hf_quant is not None:
        qq = hf_quant.get("quantization") or {}
        algo = str(qq.get("quant_algo", "")).lower()
        kv = SCHEMES["fp8"] if "fp8" in str(qq.get("kv_cache_quant_algo", "")).lower() else SCHEMES["bf16"]
        declared = "kv_cache_quant_algo" if qq.get("kv_cache_quant_algo") else ""
        if algo == "mixed_precision":  # per-layer mix (NVFP4 MLPs/experts, FP8 attention): the common case
            nv = SCHEMES["nvfp4"]
            return QuantConfig(SCHEMES["fp8"], nv, nv, nv, SCHEMES["bf16"], kv, declared)
        s = scheme(algo) if algo else SCHEMES["bf16"]
        # modelopt NVFP4 repacks exclude the attention projections (at least the MLA ones) and lm_head.
        ex = [str(m) for m in qq.get("exclude_modules") or []]
        return replace(_with_ignores(s, ex, kv), kv_declared=declared)
    q = config.get("quantization_config")
    if not q:
        return QuantConfig.uniform("bf16")
    if not isinstance(q, dict):
        raise BadConfig(f"{path}: quantization_config is not an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        s = SCHEMES["fp8-block"] if q.get("weight_block_size") else SCHEMES["fp8"]
        qc = _with_ignores(s, list(q.get("modules_to_not_convert") or []), SCHEMES["bf16"])
        if str(config.get("expert_dtype", "")).lower() == "fp4":  # DeepSeek-V4: fp4 experts, ue8m0 scale per 32
            qc = replace(qc, experts=SCHEMES["mxfp4"])
        return qc
    if method == "mxfp4":
        bf = SCHEMES["bf16"]
        return QuantConfig(bf, bf, SCHEMES["mxfp4"], bf, bf, bf)
    if method == "compressed-tensors":
        return _compressed_tensors(q, path)
    if method in ("modelopt",):  # modelopt in config.json: an fp8 `kv_cache_scheme` dict = kv_cache_quant_algo FP8
        kvs = q.get("kv_cache_scheme")
        fp8_kv = isinstance(kvs, dict) and kvs.get("type") == "float" and kvs.get("num_bits") == 8
        qc = QuantConfig.uniform(str(q.get("quant_algo", "fp8")).lower(), kv="fp8" if fp8_kv else None)
        return replace(qc, kv_declared="kv_cache_quant_algo" if fp8_kv else "")
    raise BadConfig(f"{path}: unsupported quant_method {method!r}")
