"""The engines' own words for the KV-cache format (`--kv-cache-dtype`), read as servescope's KV schemes.

Does: map each value vLLM and SGLang take for `--kv-cache-dtype` to the quantization scheme the model prices
(specs.quant: bytes per element), `auto` to None (the format the engine's default allocates for the checkpoint,
specs.kv_cache), and say which engine's vocabulary a value comes from. servescope's own scheme names (bf16, fp8,
…) are accepted as before.
  vLLM    `auto`, `bfloat16`, `fp8`, `fp8_e4m3`, `fp8_e5m2`, `fp8_inc`, `fp8_ds_mla` (and `int8`, `float16` in some
          releases): vllm-project/vllm vllm/config/cache.py `CacheDType` (VLLM-KVDTYPE).
  SGLang  `auto`, `fp8_e5m2`, `fp8_e4m3`, `bf16`, `bfloat16`, `fp4_e2m1` (MXFP4 only): sgl-project/sglang
          python/sglang/srt/server_args.py `ServerArgs.kv_cache_dtype` choices (SGLANG-KVDTYPE).
Every FP8 variant is one byte per element (E4M3 or E5M2, the Intel and DeepSeek-MLA FP8 paths alike): the model
prices bytes, not the exponent split.
Does not: check that an engine supports a value on a GPU (the engines refuse at start-up), or price scales.
"""

from __future__ import annotations

from servescope.errors import UnknownName

SOURCES = {
    "VLLM-KVDTYPE": "vllm-project/vllm vllm/config/cache.py: CacheDType = Literal['auto', 'bfloat16', 'fp8', "
                    "'fp8_e4m3', 'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla'] (int8 and float16 in some releases)",
    "SGLANG-KVDTYPE": "sgl-project/sglang python/sglang/srt/server_args.py: kv_cache_dtype choices ['auto', "
                      "'fp8_e5m2', 'fp8_e4m3', 'bf16', 'bfloat16', 'fp4_e2m1'] ('fp4_e2m1' only mxfp4)",
}

# engine value -> (servescope KV scheme or None for `auto`, source)
KV_CACHE_DTYPES: dict[str, tuple[str | None, str]] = {
    "auto": (None, "VLLM-KVDTYPE, SGLANG-KVDTYPE"),
    "fp8": ("fp8", "VLLM-KVDTYPE"),
    "fp8_e4m3": ("fp8", "VLLM-KVDTYPE, SGLANG-KVDTYPE"),
    "fp8_e5m2": ("fp8", "VLLM-KVDTYPE, SGLANG-KVDTYPE"),
    "fp8_inc": ("fp8", "VLLM-KVDTYPE"),
    "fp8_ds_mla": ("fp8", "VLLM-KVDTYPE"),
    "bfloat16": ("bf16", "VLLM-KVDTYPE, SGLANG-KVDTYPE"),
    "bf16": ("bf16", "SGLANG-KVDTYPE"),
    "float16": ("fp16", "VLLM-KVDTYPE"),
    "int8": ("int8", "VLLM-KVDTYPE"),
    "fp4_e2m1": ("mxfp4", "SGLANG-KVDTYPE"),
}


def kv_scheme(value: str | None) -> str | None:
    """The KV scheme servescope prices for an engine's `--kv-cache-dtype` value (or one of its own scheme names);
    None for `auto` or no value. UnknownName naming the value and the accepted ones."""
    if value is None:
        return None
    key = value.strip().lower()
    if key in KV_CACHE_DTYPES:
        return KV_CACHE_DTYPES[key][0]
    from servescope.specs.quant import SCHEMES

    if key in SCHEMES:
        return key
    raise UnknownName(f"--kv-quant {value!r}: not a KV-cache dtype; vLLM/SGLang --kv-cache-dtype values "
                      f"{', '.join(KV_CACHE_DTYPES)} or a scheme {', '.join(SCHEMES)}")
