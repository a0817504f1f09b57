"""Kernel families seen in the wild (issue 9): each has rows in tests/data/kernel_names.csv, real where a trace in
shared/ has the family, else quoted from the library's source and marked so in `source` (tests/data/README.md).
The rows themselves are classified by tests/analysis/test_classify.py::test_real_kernel_name."""

from __future__ import annotations

import csv
import re

import pytest

from independent import DATA
from servescope.analysis.classify import classify_name

# family → (pattern over the CSV name, class, whether a trace in shared/ has one)
FAMILIES = {
    "SageAttention": (r"^sage_fwd$|^_attn_fwd$|^quant_per_block_int8_kernel$", None, False),
    "FlashInfer": (r"^flashinfer::", "attention", False),
    "FlashAttention-3": (r"FlashAttnFwdSm90", "attention", False),
    "FlashAttention-2": (r"^void flash::flash_fwd_kernel", "attention", True),
    "cuDNN FFT convolution": (r"^fft2d_", "gemm", False),
    "cuBLASLt epilogue": (r"epilogue::impl::globalKernel", "gemm", True),
    "AITER": (r"^_ZN5aiter", None, True),
    "CK": (r"^_ZN7ck_tile", None, True),
    "hipBLASLt": (r"^Cijk_", "gemm", True),
}


def _rows() -> list[dict[str, str]]:
    with (DATA / "kernel_names.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("family", FAMILIES)
def test_family_has_rows_with_their_provenance(family: str) -> None:
    pattern, kernel_class, real = FAMILIES[family]
    rows = [r for r in _rows() if re.search(pattern, r["name"])]
    assert rows, f"no row for {family}"
    from_traces = [r for r in rows if r["source"].startswith("traces/")]
    if real:
        assert from_traces, f"{family}: a real name from a trace is expected"
    else:
        assert not from_traces
        assert all(r["source"].split(":")[0] in ("quoted", "library source", "constructed")
                   or r["source"].startswith("reference/") for r in rows)
    for r in rows:
        if kernel_class is not None:
            assert r["expected_class"] == kernel_class
        assert classify_name(r["name"])[0] == r["expected_class"]


@pytest.mark.parametrize(("name", "kernel_class"), [
    ("message_fwd_kernel", "other"),  # `sage_fwd` only as its own word
    ("void flashinfer::norm::RMSNormKernel<8u>(half*)", "norm"),  # the namespace alone is not attention
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bE", "norm"),  # `aiter` + `…pa_` rule needs pa_ right after the length
])
def test_family_rules_do_not_overreach(name: str, kernel_class: str) -> None:
    assert classify_name(name)[0] == kernel_class
