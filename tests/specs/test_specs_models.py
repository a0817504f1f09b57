"""Model specs from config.json: parameter counts against independent arithmetic, layouts, quantization, errors."""

from __future__ import annotations

import json

import pytest

from servescope.errors import BadConfig, UnknownName
from servescope.specs import quant
from servescope.specs.models import list_models, load_model


def test_llama_8b_params_match_the_config_formula() -> None:
    V, h, L, nh, nkv, d, inter = 128256, 4096, 32, 32, 8, 128, 14336
    per_layer = h * nh * d + 2 * h * nkv * d + nh * d * h + 3 * h * inter + 2 * h
    expected = 2 * V * h + L * per_layer + h
    assert expected == 8_030_261_248
    m = load_model("llama-3.1-8b")
    assert m.params.total == expected
    assert m.params.embedding == V * h and m.params.lm_head == V * h


def test_deepseek_v3_total_and_active_match_the_reference() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.attention_kind == "mla" and m.n_moe_layers == 58 and m.n_dense_layers == 3
    assert m.params.total == pytest.approx(671e9, rel=0.005)
    assert m.active_params == pytest.approx(37e9, rel=0.03)
    # one routed expert: gate, up, down of 7168 x 2048
    assert m.params.per_expert == 3 * 7168 * 2048
    assert m.n_mtp_layers == 1 and m.params.mtp > 0
    assert m.native_quant.experts.name == "fp8-block"


def test_kimi_k25_sizes_and_int4_experts() -> None:
    m = load_model("kimi-k2.5")
    assert m is load_model("moonshotai/Kimi-K2.5") or m.params == load_model("moonshotai/Kimi-K2.5").params
    assert m.n_layers == 61 and m.n_routed_experts == 384 and m.top_k == 8 and m.n_moe_layers == 60
    assert m.params.total == pytest.approx(1026e9, rel=0.005)
    assert m.active_params == pytest.approx(31.7e9, rel=0.02)
    # attention per layer 101.1M (reference §3d): q_a 11.0M, q_b 18.9M, kv_a 4.1M, kv_b 8.4M, o 58.7M
    assert m.params.attention / 61 == pytest.approx(101.1e6, rel=0.005)
    q = m.native_quant
    assert q.experts.name == "int4-w4a16" and q.experts.bytes_per_param == 0.5 + 2 / 32
    assert q.attention.name == "bf16" and q.shared_experts.name == "bf16" and q.dense_mlp.name == "bf16"
    assert m.kv_elems_per_token_layer() * 61 * 2 == 70_272  # bytes/token in BF16, reference §3d


def test_gpt_oss_sliding_layers_and_mxfp4() -> None:
    m = load_model("openai/gpt-oss-120b")
    assert m.n_attn("sliding") == 18 and m.n_attn("full") == 18 and m.sliding_window == 128
    assert m.native_quant.experts.name == "mxfp4" and m.native_quant.attention.name == "bf16"
    assert m.params.total == pytest.approx(117e9, rel=0.01)
    assert m.active_params == pytest.approx(5.1e9, rel=0.05)


def test_hybrid_and_wrapped_configs() -> None:
    q35 = load_model("qwen3.5-397b-a17b")  # multimodal wrapper: text_config
    assert q35.n_attn("linear") == 45 and q35.n_attn("full") == 15 and q35.linear_state_elems > 0
    assert q35.params.total == pytest.approx(397e9, rel=0.02)
    nh = load_model("nemotron-h-56b")  # hybrid_override_pattern: Mamba-2 + attention + MLP blocks
    assert nh.n_attn("mamba") > 0 and nh.n_attn("full") == 10
    assert nh.params.total == pytest.approx(56e9, rel=0.05)
    v32 = load_model("deepseek-v3.2")
    assert v32.index_topk == 2048 and v32.index_n_heads == 64
    glm = load_model("zhipuai/GLM-5")
    assert glm.n_moe_layers == 75 and glm.v_head_dim == 256
    v4 = load_model("deepseek-v4-flash")
    assert v4.attention_kind == "v4" and v4.params.total == pytest.approx(284e9, rel=0.03)


def test_nvfp4_repack_maps_to_base_architecture() -> None:
    m = load_model("nvidia/DeepSeek-R1-NVFP4")
    base = load_model("deepseek-r1")
    assert m.params == base.params
    assert m.native_quant.experts.name == "nvfp4" and m.native_quant.kv.name == "fp8"


def test_every_bundled_name_loads() -> None:
    names = list_models()
    assert len(names) >= 20
    for n in names:
        assert load_model(n).params.total > 1e8


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownName, match="kimi-k2.5"):
        load_model("kimi-k2.55")
    with pytest.raises(UnknownName, match="servescope specs list"):
        load_model("no-such-model")


@pytest.mark.parametrize(
    ("patch", "needle"),
    [({"num_attention_heads": 0}, "non-positive"), ({"num_experts_per_tok": 300}, "experts per token")],
)
def test_impossible_configs_are_bad_config(tmp_path, patch: dict, needle: str) -> None:
    import json

    from servescope.specs.models import _bundled

    cfg, _, _ = _bundled("deepseek-ai--DeepSeek-V3")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, **patch}))
    with pytest.raises(BadConfig, match=needle):
        load_model(str(path))


def test_binary_config_is_bad_config(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(BadConfig, match="UTF-8"):
        load_model(str(path))


def test_malformed_config_names_the_file(tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(BadConfig, match="config.json"):
        load_model(str(bad))
    missing = tmp_path / "m2" / "config.json"
    missing.parent.mkdir()
    missing.write_text(json.dumps({"hidden_size": 64, "vocab_size": 100}))
    with pytest.raises(BadConfig, match="num_hidden_layers"):
        load_model(str(missing))


def test_local_config_path(tmp_path) -> None:
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": True}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load_model(str(tmp_path))
    d = 16
    per_layer = 64 * 4 * d + 2 * 64 * 2 * d + 4 * d * 64 + 3 * 64 * 128 + 2 * 64
    assert m.params.total == 1000 * 64 + 2 * per_layer + 64


def test_quant_bytes_per_param() -> None:
    assert quant.scheme("int4-w4a16").bytes_per_param == 0.5625
    assert quant.scheme("int4-w4a16-g128").bytes_per_param == 0.5 + 2 / 128
    assert quant.scheme("nvfp4").bytes_per_param == 0.5 + 1 / 16
    assert quant.scheme("mxfp4").bytes_per_param == 0.5 + 1 / 32
    assert quant.scheme("fp8_block").gemm_dtype == "fp8"
    assert quant.scheme("int4_wo").gemm_dtype == "bf16"  # Marlin W4A16 runs BF16 tensor cores
    with pytest.raises(UnknownName):
        quant.scheme("fp3")


def test_more_architectures_match_their_published_sizes() -> None:
    # Published totals / actives (model cards): Nemotron-3 Super 120B-A12B (latent MoE, relu2 experts),
    # Nemotron-3 Nano 30B-A3B (31.6B), Llama-4 Maverick 400B-A17B (MoE every other layer), MiMo-V2-Flash 309B-A15B
    # (per-layer MoE flags), Mixtral-8x7B 46.7B-A12.9B.
    sup = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert sup.params.total == pytest.approx(120e9, rel=0.03) and sup.active_params == pytest.approx(12e9, rel=0.1)
    assert load_model("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16").params.total == pytest.approx(31.6e9, rel=0.02)
    mav = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert mav.n_moe_layers == 24 and mav.params.total == pytest.approx(400e9, rel=0.03)
    assert load_model("xiaomimimo/mimo-v2-flash").params.total == pytest.approx(309e9, rel=0.02)
    mix = load_model("mixtral-8x7b-v0.1")
    assert mix.params.total == pytest.approx(46.7e9, rel=0.01) and mix.active_params == pytest.approx(12.9e9, rel=0.03)
    glm52 = load_model("nvidia/GLM-5.2-NVFP4")  # layer_types "deepseek_sparse_attention"
    assert glm52.n_attn("full") == 78 and glm52.native_quant.experts.name == "nvfp4"
    q36 = load_model("nvidia/Qwen3.6-27B-NVFP4")  # modelopt MIXED_PRECISION
    assert q36.native_quant.dense_mlp.name == "nvfp4" and q36.native_quant.attention.name == "fp8"
