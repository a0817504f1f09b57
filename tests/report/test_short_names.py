"""Kernel short names (issue 20 part 4): the function of the demangled signature, never a template argument's type,
and distinct per table. Real names: tests/data/kernel_names.csv and every kernel name of the shared traces."""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path

import pytest

from independent import DATA
from servescope.report.trace_text import short_name, short_names
from servescope.trace.load import load_traces

ARGUMENT_TYPES = re.compile(r"^(KernelParams|Params|\w*Metadata|\w*Accessor)$")
TRACES = sorted(p for p in (DATA / "traces").rglob("*") if p.is_file() and p.name != "LICENSE")


def _csv_names() -> list[str]:
    with open(DATA / "kernel_names.csv", newline="") as f:
        return [r["name"] for r in csv.DictReader(f)]


@cache
def _trace_names(path: Path) -> tuple[str, ...]:
    names: set[str] = set()
    for t in load_traces(path):
        ev = t.events
        names |= set(ev.filter(ev["kind"].is_in(["kernel", "memcpy", "memset"]))["name"].to_list())
    return tuple(sorted(names))


@pytest.mark.parametrize(("name", "short"), [
    ("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
     "vectorized_elementwise_kernel"),
    ("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
     "cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, "
     "4, true>)", "finalizeKernelVecLoad"),
    ("void at::native::batch_norm_backward_kernel<c10::BFloat16, c10::BFloat16, float, int>(at::"
     "GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, at::DefaultPtrTraits, int>)", "batch_norm_backward_kernel"),
    ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float>, float>(int, int volatile*, "
     "TensorListMetadata<4>, AdamFunctor<float>, float)", "multi_tensor_apply_kernel"),
    ("void at::native::<unnamed>::CatArrayBatchedCopy_vectorized<at::native::<unnamed>::OpaqueType<(unsigned int)2>, "
     "unsigned int, (int)1>(char *, int)", "CatArrayBatchedCopy_vectorized"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float>(cublasGemvParams<float>)",
     "gemvx::kernel"),
    ("_ZN5aiter19fmha_fwd_hd128_bf16E", "fmha_fwd_hd128_bf16"),
    ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassE", "Rmsnorm2dFwd"),
    ("volta_sgemm_128x32_nt", "volta_sgemm_128x32_nt"),
])
def test_the_function_not_a_template_argument(name: str, short: str) -> None:
    assert short_name(name) == short


def test_no_csv_name_shortens_to_an_argument_type() -> None:
    for name in _csv_names():
        s = short_name(name)
        assert s and not ARGUMENT_TYPES.match(s), (name, s)


def test_shared_names_are_told_apart_in_one_table() -> None:
    a = "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, 0>(long*, int)"
    b = "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, 0>(long*, int)"
    labels = short_names([a, b])
    assert labels == {a: "reshape_and_cache_flash_kernel<__nv_bfloat16>",
                      b: "reshape_and_cache_flash_kernel<__hip_bfloat16>"}
    same = ["void f<1>(int, float)", "void f<1>(int, float) "]  # nothing tells them apart: numbered
    assert sorted(short_names(same).values()) == ["f", "f #2"]


@pytest.mark.parametrize("width", [36, 48, 80])
def test_csv_names_distinct_in_one_table(width: int) -> None:
    names = _csv_names()
    labels = short_names(names, width)
    assert len(set(labels.values())) == len(set(names))
    assert all(len(v) <= width and not ARGUMENT_TYPES.match(v) for v in labels.values())


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(DATA / "traces")))
def test_each_trace_distinct_names_distinct_shorts(path: Path) -> None:
    names = _trace_names(path)
    for width in (36, 48, 80):
        labels = short_names(names, width)
        assert len(set(labels.values())) == len(names), width
        bad = [v for v in labels.values() if ARGUMENT_TYPES.match(v.split("<")[0].split(" #")[0])]
        assert not bad and all(len(v) <= width for v in labels.values())
