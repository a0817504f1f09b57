"""The KV-cache element format an engine really allocates for a checkpoint when left at its default ("auto").

What it does: `engine_kv(model, backend, gpu)` returns the KV `QuantScheme` and the rule (with its source) that
picked it, from how the checkpoint declares its cache (`QuantConfig.kv_declared`: a compressed-tensors
`kv_cache_scheme`, a modelopt `kv_cache_quant_algo`, or nothing), the model's attention (DeepSeek sparse
attention) and the GPU's compute capability.
What it does not: honour a `--kv-cache-dtype` the user passes (Scenario.build's `kv_quant` overrides this), or
model the accuracy of an fp8 cache.

Rules per engine default (read from the engines' code; the versions are those of the dev validation rows):
  vLLM 0.19   "auto" = model dtype (CacheConfig.cache_dtype docstring, vllm/config/cache.py L49); a quant config
              with a `kv_cache_scheme` (llm-compressor / compressed-tensors) forces "fp8"
              (vllm/model_executor/layers/attention/attention.py L228-234); a modelopt `kv_cache_quant_algo` is read
              into ModelOpt*Config but sets no `kv_cache_scheme`, so the cache stays in the model dtype
              (vllm/model_executor/layers/quantization/modelopt.py L289-306); DeepSeek-V3.2-style sparse attention
              defaults to fp8 (CacheConfig.cache_dtype docstring: "Some models (namely DeepSeekV3.2) default to fp8").
  SGLang 0.5.9 "auto" = fp8_e4m3 when the quant config's `kv_cache_quant_algo` is "FP8" (modelopt), else the model
              dtype (sglang/srt/model_executor/model_runner.py configure_kv_cache_dtype); compressed-tensors configs
              carry no `kv_cache_quant_algo` there; DeepSeek sparse attention (NSA): fp8_e4m3 on SM >= 10, else
              bfloat16 (sglang/srt/server_args.py _set_default_nsa_kv_cache_dtype).
  TRT-LLM     UNVERIFIED (no TensorRT-LLM source was read here): taken as the checkpoint's modelopt
              `kv_cache_quant_algo` (FP8 -> fp8), else the model dtype, the rule SGLang follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servescope.specs.quant import SCHEMES, QuantScheme

if TYPE_CHECKING:
    from servescope.specs.hardware import GpuSpec
    from servescope.specs.models import ModelSpec

_VLLM = "vLLM 0.19"
_SGL = "SGLang 0.5.9"


@dataclass(frozen=True)
class KvChoice:
    """The KV format an engine allocates and why (`rule` names the code path it follows)."""

    scheme: QuantScheme
    rule: str


def _declared_fp8(model: ModelSpec, how: str) -> bool:
    q = model.native_quant
    return q.kv_declared == how and q.kv.name == "fp8"


def engine_kv(model: ModelSpec, backend: str, gpu: GpuSpec) -> KvChoice:
    """KV format of `backend`'s default configuration for this checkpoint on this GPU (rules: module docstring).
    The model dtype counts as bf16 (fp16 has the same 2 bytes per element)."""
    bf, fp8 = SCHEMES["bf16"], SCHEMES["fp8"]
    dsa = bool(model.index_topk) and model.attention_kind == "mla"
    be = backend.lower()
    if be == "vllm":
        if dsa:
            return KvChoice(fp8, f"{_VLLM}: DeepSeek sparse attention defaults to fp8 (vllm/config/cache.py)")
        if model.native_quant.kv_declared == "kv_cache_scheme":
            return KvChoice(fp8, f"{_VLLM}: checkpoint kv_cache_scheme forces fp8 (layers/attention/attention.py)")
        return KvChoice(bf, f"{_VLLM}: cache_dtype auto = model dtype (vllm/config/cache.py)")
    if be == "sglang" and dsa:
        if (gpu.sm_number or 0) >= 100:
            return KvChoice(fp8, f"{_SGL}: NSA models default to fp8_e4m3 on SM>=10 (server_args.py)")
        return KvChoice(bf, f"{_SGL}: NSA models default to bfloat16 below SM 10 (server_args.py)")
    src = _SGL + " model_runner.configure_kv_cache_dtype" if be == "sglang" else "TRT-LLM (UNVERIFIED, SGLang's rule)"
    if _declared_fp8(model, "kv_cache_quant_algo"):
        return KvChoice(fp8, f"{src}: checkpoint kv_cache_quant_algo FP8 -> fp8")
    return KvChoice(bf, f"{src}: auto = model dtype")
