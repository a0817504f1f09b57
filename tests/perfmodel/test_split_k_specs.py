"""specs/data/decode_kernels.toml, the sparse decode kernels' loop shapes: every number sourced, a bad file one error
naming the file, the kernel and the field."""

from __future__ import annotations

from typing import Any

import pytest

from servescope.errors import BadConfig
from servescope.specs import decode_kernels


def test_every_number_has_its_source() -> None:
    for k in decode_kernels.kernels():
        for f in ("block", "head_block", "token_bytes", "q_dim", "state_dim", "segments", "slices"):
            assert k.sources.get(f), (k.label, f)
    glm = decode_kernels.shape_for("_fused_gather_dequant_attn_kernel")
    assert glm is not None and (glm.block, glm.head_block, glm.token_bytes) == (32, 16, 660.0)
    assert "54929" in glm.source


def _with(monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> None:
    monkeypatch.setattr(decode_kernels, "read_toml", lambda name: doc)
    decode_kernels.kernels.cache_clear()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("block"), "kernel 1 .*missing block"),
    (lambda d: d.update(block=0), "kernel 1 .*≥ 1"),
    (lambda d: d.update(pattern="("), "kernel 1 "),
    (lambda d: d["source"].pop("token_bytes"), "kernel 1 .*no source for token_bytes"),
])
def test_a_bad_table_is_one_error(monkeypatch: pytest.MonkeyPatch, edit: Any, message: str) -> None:
    good = decode_kernels.read_toml("decode_kernels.toml")
    row = dict(good["kernel"][0], source=dict(good["kernel"][0]["source"]))
    edit(row)
    _with(monkeypatch, {"kernel": [row]})
    try:
        with pytest.raises(BadConfig, match=f"decode_kernels.toml: {message}"):
            decode_kernels.kernels()
    finally:
        decode_kernels.kernels.cache_clear()


def test_no_kernels_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _with(monkeypatch, {})
    try:
        with pytest.raises(BadConfig, match="no \\[\\[kernel\\]\\] tables"):
            decode_kernels.kernels()
    finally:
        decode_kernels.kernels.cache_clear()
