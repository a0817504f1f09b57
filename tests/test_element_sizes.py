"""One element-size table (units.BYTES_PER_ELEMENT): its sizes agree with NumPy's itemsize where NumPy has the
type, every reader's spelling resolves through it, and no other module writes its own dtype → bytes literal."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import servescope
from servescope.analysis.costs import ELEMENT_BYTES, LOGICAL_BYTES
from servescope.analysis.rules import DTYPE_BYTES, dtype_bytes
from servescope.specs.quant import SCHEMES
from servescope.units import BYTES_PER_ELEMENT

SRC = Path(servescope.__file__).parent
NUMPY = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "int64": "int64", "int32": "int32",
         "int16": "int16", "int8": "int8", "uint64": "uint64", "uint32": "uint32", "uint16": "uint16",
         "uint8": "uint8", "bool": "bool", "complex64": "complex64", "complex128": "complex128"}
# dtype → bytes literals that stay where they are, and why
ELSEWHERE = {
    "perfmodel/op_roofline.py": "aiconfigurator table dtypes with their block scales folded in (nvfp4 0.5625)",
    "planner/applied.py": "BITS: bits per value of the GEMM dtypes a trace shows (8 x the element size)",
}


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_sizes_agree_with_numpy(name):
    assert BYTES_PER_ELEMENT[name] == np.dtype(NUMPY[name]).itemsize


def test_the_readers_spellings_resolve_through_the_table():
    assert ELEMENT_BYTES["c10::BFloat16"] == 2 and ELEMENT_BYTES["c10::Float4_e2m1fn_x2"] == 1
    assert ELEMENT_BYTES["long int"] == 8 and ELEMENT_BYTES["c10::Float8_e5m2"] == 1
    assert LOGICAL_BYTES == {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5, "int8": 1.0, "fp32": 4.0}
    assert dtype_bytes("c10::Half") == 2 and dtype_bytes("ComplexDouble") == 16 and dtype_bytes("Float8_e4m3fn") == 1
    assert all(isinstance(v, int) for v in DTYPE_BYTES.values())


def test_quantization_schemes_add_their_scales_to_the_element_size():
    # bytes per parameter written out from each format's layout: value bits / 8 + scale bytes / block
    expected = {"bf16": 2, "fp16": 2, "fp8": 1, "fp8-block": 1 + 4 / 16384, "int4-w4a16": 0.5 + 2 / 32,
                "int4-w4a16-g128": 0.5 + 2 / 128, "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32, "int8": 1}
    assert {k: s.bytes_per_param for k, s in SCHEMES.items()} == pytest.approx(expected, rel=0, abs=0)


def _dtype_tables(tree: ast.AST) -> list[int]:
    """Line numbers of dict literals mapping two or more known dtype names to numbers."""
    names = set(BYTES_PER_ELEMENT) | {"bfloat16", "float16", "float32", "float", "half", "double"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            hits = [k for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value in names
                    and isinstance(v, ast.Constant) and isinstance(v.value, int | float) and v.value in (0.5, 1, 2, 4, 8)]
            if len(hits) >= 2:
                lines.append(node.lineno)
    return lines


def test_no_other_module_writes_its_own_element_size_table():
    found = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel == "units.py" or rel in ELSEWHERE:
            continue
        lines = _dtype_tables(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[rel] = lines
    assert found == {}
