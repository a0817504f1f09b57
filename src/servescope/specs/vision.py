"""Parameters of a multimodal checkpoint's vision tower, from its config.json `vision_config` (weights only).

What it does: `vision_params(outer_config, text_hidden)` counts a ViT encoder and its projector so the memory
model can load them (they sit in HBM beside the text model even when no image is sent; vLLM and SGLang load the
encoder on every rank). Formula (elements; hv vision hidden, iv vision MLP width, L layers, p patch, m merge):
    L · (4·hv² + 2·hv·iv)            attention (q, k, v, o) + MLP (fc1, fc2) per layer
    + 3·p²·hv                         patch embedding (RGB; × temporal patch where the config has one)
    + (m²·hv)² + m²·hv·text_hidden    patch-merger projector (m² patches → one token of the text width)
Keys read (first present): hidden `vt_hidden_size|hidden_size|embed_dim`, MLP `vt_intermediate_size|
intermediate_size`, layers `vt_num_hidden_layers|depth|num_hidden_layers`, `patch_size`, `temporal_patch_size`,
merge `merge_kernel_size|spatial_merge_size`. Norms, biases and position tables are left out (< 2 %).
What it does not: time the encoder (image prompts are not modelled) or handle audio towers.
"""

from __future__ import annotations

from typing import Any


def _first(cfg: dict[str, Any], *keys: str) -> float:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
        if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return float(v[0])
    return 0.0


def vision_params(outer: dict[str, Any], text_hidden: int) -> float:
    """Vision-tower parameters of a multimodal config (0 when it has no `vision_config`); formula in the docstring."""
    vc = outer.get("vision_config")
    if not isinstance(vc, dict):
        return 0.0
    hv = _first(vc, "vt_hidden_size", "hidden_size", "embed_dim")
    iv = _first(vc, "vt_intermediate_size", "intermediate_size") or 4.0 * hv
    layers = _first(vc, "vt_num_hidden_layers", "depth", "num_hidden_layers")
    if not hv or not layers:
        return 0.0
    patch = _first(vc, "patch_size") or 14.0
    temporal = _first(vc, "temporal_patch_size") or 1.0
    merge = _first(vc, "merge_kernel_size", "spatial_merge_size") or 1.0
    merged = merge * merge * hv
    return layers * (4.0 * hv * hv + 2.0 * hv * iv) + 3.0 * patch * patch * temporal * hv + merged * merged \
        + merged * float(text_hidden)
