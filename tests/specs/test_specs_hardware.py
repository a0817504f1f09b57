"""Hardware specs (specs.hardware) and collective curves (specs.collectives).

Expected numbers come from /work/shared/reference/hardware-and-models.md (section cited at each use) and are
typed here, or are computed in the test from the raw TOML value; never copied from loader output.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from importlib import resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servescope.errors import BadConfig, ScenarioError, UnknownName
from servescope.specs.collectives import (
    COLLECTIVES,
    bus_factor,
    collective_time_s,
    curve_time_s,
    load_collectives,
    monotone_fit,
)
from servescope.specs.hardware import list_gpus, load_gpu, normalize_name, parse_gpu_toml

REQUIRED = {
    "h100_sxm", "h100_pcie", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "a100_sxm", "l40s",
    "rtx_pro_6000_server", "rtx_pro_6000_workstation", "rtx_4090", "rtx_5090", "mi300x",
}
DATA = resources.files("servescope.specs").joinpath("data")


def _toml_files(folder: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for entry in DATA.joinpath(folder).iterdir():
        if entry.name.endswith(".toml"):
            out.append((entry.name, tomllib.loads(entry.read_text(encoding="utf-8"))))
    return out


def _raw(gpu: str) -> dict[str, Any]:
    return tomllib.loads(DATA.joinpath("gpus", f"{gpu}.toml").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- GPU specs

def test_all_required_gpus_load_with_sane_numbers() -> None:
    assert set(list_gpus()) >= REQUIRED
    for name in list_gpus():
        g = load_gpu(name)
        assert g.name == name
        assert g.vendor in ("nvidia", "amd")
        assert g.generation in ("ampere", "ada", "hopper", "blackwell", "cdna3")
        assert 50 < g.sm_count < 400
        assert 16e9 < g.hbm_bytes < 400e9
        assert 0.5e12 < g.hbm_bw_bytes_per_s < 10e12
        assert g.flops_per_s["bf16"] > 5e13  # RTX 3090: 71 TFLOP/s dense, the lowest bundled
        assert g.l2_bytes > 1e6
        assert g.pcie_gen in (4, 5, 6)
        assert g.pcie_bw_bytes_per_s >= 32e9
        assert set(g.sources) >= {"sm_count", "hbm", "hbm_bw", "flops.bf16", "p2p"}
        assert (g.nvlink_bw_bytes_per_s > 0) == (g.nvlink_domain_gpus > 0)


def test_every_number_in_the_data_has_a_source() -> None:
    def walk(where: str, node: Any) -> int:
        count = 0
        if isinstance(node, dict):
            has_value = any(k.startswith("value") or k in ("latency_us", "world_sizes") for k in node)
            if has_value:
                src = node.get("source") or node.get("world_sizes_source")
                assert isinstance(src, str) and src.strip(), f"{where}: number without a source"
                count += 1
            for k, v in node.items():
                count += walk(f"{where}.{k}", v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                count += walk(f"{where}[{i}]", v)
        return count

    gpu_files = _toml_files("gpus")
    assert len(gpu_files) >= 14
    assert sum(walk(n, d) for n, d in gpu_files) >= 14 * 16  # 16-19 numbers per GPU file
    coll_files = _toml_files("collectives")
    assert sum(walk(n, d) for n, d in coll_files) >= 100
    for name, doc in coll_files:  # the proxy tables name a system and carry a source too
        for proxy in doc.get("proxy", {}).get("nvlink", {}).values():
            assert proxy["source"].strip(), name


def test_unit_conversion_from_the_typed_reference_values() -> None:
    # reference §1a: H100 SXM5 3.35 TB/s, 989 TFLOPS BF16 dense, 50 MB L2, NVLink 450 GB/s per direction
    raw = _raw("h100_sxm")
    g = load_gpu("h100_sxm")
    assert g.hbm_bw_bytes_per_s == pytest.approx(raw["hbm_bw"]["value_tb_per_s"] * 1e12)
    assert 3e12 < g.hbm_bw_bytes_per_s < 3.5e12
    assert g.flops_per_s["bf16"] == pytest.approx(989 * 1e12)
    assert g.l2_bytes == 50 * 1024 * 1024
    assert g.hbm_bytes == 80 * 1024**3
    assert g.nvlink_bw_bytes_per_s == pytest.approx(450e9)
    # MI300X XGMI: 896 GB/s is a bidirectional aggregate → 448 GB/s per direction
    assert load_gpu("mi300x").nvlink_bw_bytes_per_s == pytest.approx(896e9 / 2)
    # RTX 5090 L2: deviceQuery 100,663,296 B (NVIDIA/nccl#1637)
    assert load_gpu("rtx_5090").l2_bytes == 100_663_296


def test_unsupported_dtypes_are_zero_and_supported_ones_are_not() -> None:
    assert load_gpu("a100_sxm").flops_per_s["fp8"] == 0.0  # no FP8 tensor cores on sm_80
    for hopper in ("h100_sxm", "h200_sxm", "h100_pcie"):
        assert load_gpu(hopper).flops_per_s["fp4"] == 0.0
        assert load_gpu(hopper).flops_per_s["fp8"] > 0
    for bw in ("b200_sxm", "b300_sxm", "gb200", "gb300", "rtx_pro_6000_server", "rtx_5090"):
        g = load_gpu(bw)
        assert g.flops_per_s["fp4"] > g.flops_per_s["fp8"] > g.flops_per_s["bf16"]


def test_rtx_pro_6000_editions_differ_by_11_percent_in_bandwidth() -> None:
    # reference §1a note: SE 1,597 vs WS 1,792 GB/s
    se, ws = load_gpu("rtx_pro_6000_server"), load_gpu("rtx_pro_6000_workstation")
    assert se.hbm_bw_bytes_per_s / ws.hbm_bw_bytes_per_s == pytest.approx(1597 / 1792)
    assert not se.has_nvlink and se.p2p
    assert not load_gpu("rtx_4090").p2p and not load_gpu("rtx_5090").p2p


def test_unsourced_numbers_are_flagged() -> None:
    assert "sm_count" in load_gpu("b300_sxm").unsourced
    assert "l2" in load_gpu("b200_sxm").unsourced
    assert load_gpu("h100_sxm").unsourced == ()


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("H100-SXM", "h100_sxm"), ("h100", "h100_sxm"), (" H100 sxm5 ", "h100_sxm"), ("B200", "b200_sxm"),
        ("rtx-pro-6000", "rtx_pro_6000_server"), ("RTX PRO 6000 WS", "rtx_pro_6000_workstation"),
        ("NVIDIA B300 SXM6 AC", "b300_sxm"), ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("AMD Instinct MI300X", "mi300x"), ("NVIDIA A100-SXM4-80GB", "a100_sxm"), ("GB200", "gb200"),
        ("rtx_4090", "rtx_4090"), ("NVIDIA GeForce RTX 5090", "rtx_5090"),
    ],
)
def test_aliases(alias: str, canonical: str) -> None:
    assert load_gpu(alias).name == canonical


def test_normalize_name() -> None:
    assert normalize_name("  H100--SXM_5 ") == "h100_sxm_5"


def test_unknown_name_lists_known_names_on_one_line() -> None:
    with pytest.raises(UnknownName) as err:
        load_gpu("v100")
    msg = str(err.value)
    assert "v100" in msg and "\n" not in msg
    for name in REQUIRED:
        assert name in msg


def _minimal_toml(extra: str = "") -> str:
    text = 'name = "x"\ndisplay_name = "X"\nvendor = "nvidia"\ngeneration = "hopper"\narch = "A"\n'
    text += 'compute_capability = "sm_90"\ninterconnect = "pcie"\n'
    for key, line in [("sm_count", "value = 10"), ("hbm", "value_gib = 1"), ("hbm_bw", "value_tb_per_s = 1"),
                      ("l2", "value_mib = 1"), ("nvlink_bw", "value_gb_per_s_bidir = 100"),
                      ("pcie_gen", "value = 5"), ("pcie_bw", "value_gb_per_s = 64"), ("p2p", "value = true"),
                      ("nvlink_domain", "value_gpus = 0"), ("flops.bf16", "value_tflops = 2")]:
        text += f'[{key}]\n{line}\nsource = "s"\n'
    return text + extra


def test_parse_minimal_spec_converts_every_unit() -> None:
    g = parse_gpu_toml("x.toml", _minimal_toml('[tdp]\nvalue_w = 300\nsource = "s"\n'))
    assert g.hbm_bytes == 2**30 and g.l2_bytes == 2**20 and g.hbm_bw_bytes_per_s == 1e12
    assert g.nvlink_bw_bytes_per_s == 50e9 and g.flops_per_s == {"bf16": 2e12} and g.tdp_w == 300


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name = ", "malformed TOML"),
        (_minimal_toml().replace('source = "s"\n', 'source = ""\n', 1), "source"),
        (_minimal_toml().replace("value_gib = 1", "value_furlongs = 1"), "unit"),
        (_minimal_toml().replace("value_gib = 1", "value_gib = -1"), "negative"),
        (_minimal_toml('[flops.fp16]\nvalue_tflops = 1\nsource = "s"\n'), "fp16"),
        (_minimal_toml().replace('vendor = "nvidia"\n', ""), "vendor"),
        (_minimal_toml().replace("[p2p]\nvalue = true", "[p2p]\nvalue = 1"), "p2p"),
    ],
)
def test_bad_spec_raises_badconfig_naming_the_file(text: str, needle: str) -> None:
    with pytest.raises(BadConfig) as err:
        parse_gpu_toml("specs/data/gpus/bad.toml", text)
    assert "bad.toml" in str(err.value) and needle in str(err.value)


# ---------------------------------------------------------------- collectives

SIZES = [2.0**k for k in range(6, 33)]  # 64 B .. 4 GiB, beyond the largest measured point


def test_every_gpu_and_count_loads_and_time_is_monotone_and_above_the_floor() -> None:
    for name in list_gpus():
        for n in (2, 4, 8):
            curves = load_collectives(name, n)
            for coll in COLLECTIVES:
                curve = curves.curves[coll]
                assert curve.source
                times = [collective_time_s(curves, coll, b) for b in SIZES]
                assert all(t >= curve.latency_floor_s > 0 for t in times), (name, n, coll)
                assert all(b >= a for a, b in zip(times, times[1:], strict=False)), (name, n, coll)
            vllm = [collective_time_s(curves, "all_reduce", b, backend="vllm") for b in SIZES]
            assert all(b >= a for a, b in zip(vllm, vllm[1:], strict=False)), name


def test_pcie_8_gpus_has_no_custom_allreduce_but_nvlink_and_2_pcie_gpus_do() -> None:
    for pcie in ("rtx_pro_6000_server", "rtx_pro_6000_workstation", "h100_pcie"):
        c8 = load_collectives(pcie, 8)
        assert not c8.custom_allreduce_available and "PCIe" in c8.custom_allreduce_reason
        assert load_collectives(pcie, 2).custom_allreduce_available
    assert load_collectives("h100_sxm", 8).custom_allreduce_available
    assert not load_collectives("h100_sxm", 8, interconnect="pcie").custom_allreduce_available
    assert not load_collectives("rtx_4090", 2).custom_allreduce_available  # no P2P
    assert not load_collectives("h100_sxm", 3).custom_allreduce_available  # world sizes 2, 4, 6, 8
    assert load_collectives("h100_sxm", 8).custom_allreduce_max_bytes == 8 * 1024 * 1024


def test_measured_pcie_gen5_8_gpu_floor_and_bus_bandwidth() -> None:
    # reference §2a/§2b (AIC-COMM, 8x RTX PRO 6000 SE, NCCL 2.29.2): floor ~24.2 µs; 512 MB takes 38,073 µs
    c = load_collectives("rtx_pro_6000_server", 8)
    ar = c.curves["all_reduce"]
    assert not ar.derived and c.interconnect == "pcie_p2p"
    assert 24.0e-6 <= ar.latency_floor_s <= 25.0e-6
    expected_busbw = 2 * 7 / 8 * 536_870_912 / 38_073e-6  # nccl-tests busbw = 2(n-1)/n · bytes / time
    assert ar.bus_bw_bytes_per_s == pytest.approx(expected_busbw, rel=1e-3)
    assert 20e9 < ar.bus_bw_bytes_per_s < 28e9
    assert collective_time_s(c, "all_reduce", 16 * 1024) == pytest.approx(27.0e-6, abs=0.1e-6)  # §2a 16 KB
    # §2b all_to_all 64 MiB: 3.81 ms
    assert collective_time_s(c, "all_to_all", 64 * 2**20) == pytest.approx(3.81e-3, rel=0.01)


def test_log_log_interpolation_matches_reference_2f() -> None:
    # reference §2f: per-AR latency at 7168 x 2 B x bs, log-log interpolated from §2a
    h100 = load_collectives("h100_sxm", 8)
    for bs, want_us in [(8, 7.6), (32, 11.8), (64, 14.3), (128, 18.4)]:
        got = collective_time_s(h100, "all_reduce", 7168 * 2 * bs, backend="vllm")
        assert got == pytest.approx(want_us * 1e-6, rel=0.03), bs
    rtx = load_collectives("rtx_pro_6000_server", 8)
    for bs, want_us in [(1, 27.0), (8, 44.8), (128, 200.1)]:
        assert collective_time_s(rtx, "all_reduce", 7168 * 2 * bs) == pytest.approx(want_us * 1e-6, rel=0.03)
    # §2f bs64 sits in NCCL's dip (§2a: 512 KB 156.1 µs > 1 MB 131.5 µs): the monotone fit pools the two
    # points at their geometric mean
    pooled = math.sqrt(156.11e-6 * 131.52e-6)
    for nbytes in (512 * 1024, 7168 * 2 * 64, 1024 * 1024):
        assert collective_time_s(rtx, "all_reduce", nbytes) == pytest.approx(pooled, rel=0.005)


def test_monotone_fit_pools_violators_and_keeps_monotone_data() -> None:
    assert monotone_fit([1.0, 2.0, 3.0]) == pytest.approx([1.0, 2.0, 3.0])
    assert monotone_fit([1.0, 4.0, 1.0, 8.0]) == pytest.approx([1.0, 2.0, 2.0, 8.0])  # sqrt(4 * 1) = 2


def test_nvlink_custom_allreduce_is_five_times_faster_than_pcie_at_16k() -> None:
    # reference §2a: 16 KB vLLM custom AR 5.3 µs (H100 SXM) vs 27.5 µs vLLM-graph on 8x RTX PRO 6000
    h100 = collective_time_s(load_collectives("h100_sxm", 8), "all_reduce", 16384, backend="vllm")
    rtx = collective_time_s(load_collectives("rtx_pro_6000_server", 8), "all_reduce", 16384, backend="vllm")
    assert h100 == pytest.approx(5.3e-6, rel=0.02)
    assert rtx == pytest.approx(27.5e-6, rel=0.02)


def test_derived_two_parameter_curve_follows_its_formula() -> None:
    c = load_collectives("rtx_4090", 8)  # PCIe without P2P: no measurement, two-parameter form
    ar = c.curves["all_reduce"]
    assert ar.derived and not ar.message_bytes and "DERIVED" in ar.source
    assert ar.latency_floor_s == pytest.approx(41e-6)  # NVIDIA/nccl#1530
    assert ar.bus_bw_bytes_per_s == pytest.approx(28 / 64 * 32e9)  # 5090's 28 GB/s fraction of Gen4 x16
    b = 10e6
    assert collective_time_s(c, "all_reduce", b) == pytest.approx(41e-6 + 2 * 7 / 8 * b / (28 / 64 * 32e9))


def test_proxy_and_extrapolated_counts_are_labelled_derived() -> None:
    gb200 = load_collectives("gb200", 8).curves["all_reduce"]
    assert gb200.derived and "b200_sxm" in gb200.source
    assert not load_collectives("gb200", 4).curves["all_reduce"].derived
    h6 = load_collectives("h100_sxm", 6).curves["all_reduce"]
    assert h6.derived and h6.n_gpus == 8
    assert "UNSOURCED" in load_collectives("mi300x", 8).curves["all_reduce"].source


def test_one_gpu_costs_nothing_and_bad_requests_raise() -> None:
    one = load_collectives("h100_sxm", 1)
    assert all(collective_time_s(one, c, 1e9) == 0.0 for c in COLLECTIVES)
    with pytest.raises(ScenarioError):
        load_collectives("rtx_4090", 2, interconnect="nvlink")
    with pytest.raises(ScenarioError):
        load_collectives("h100_sxm", 16)  # beyond the 8-GPU NVLink domain
    with pytest.raises(ScenarioError):
        load_collectives("h100_sxm", 0)
    curves = load_collectives("h100_sxm", 8)
    with pytest.raises(ScenarioError):
        collective_time_s(curves, "all_reduce", 1.0, n_gpus=4)
    with pytest.raises(ScenarioError):
        collective_time_s(curves, "gather", 1.0)
    with pytest.raises(ScenarioError):
        collective_time_s(curves, "all_gather", 1.0, backend="vllm")


def test_bus_factor() -> None:
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_factor("send_recv", 8) == 1.0


_CURVES = [load_collectives(g, n).curves[c] for g, n, c in [
    ("rtx_4090", 8, "all_reduce"), ("rtx_pro_6000_server", 8, "all_reduce"), ("h100_sxm", 4, "all_to_all"),
    ("gb200", 16, "all_gather"), ("b200_sxm", 8, "send_recv"), ("l40s", 2, "broadcast"),
]]


@settings(max_examples=200, deadline=None)
@given(
    idx=st.integers(0, len(_CURVES) - 1),
    nbytes=st.floats(1.0, 2.0**34, allow_nan=False),
    more=st.floats(1.0, 100.0, allow_nan=False),
)
def test_more_bus_bandwidth_never_increases_time(idx: int, nbytes: float, more: float) -> None:
    curve = _CURVES[idx]
    faster = dataclasses.replace(curve, bus_bw_bytes_per_s=curve.bus_bw_bytes_per_s * more)
    assert curve_time_s(faster, nbytes) <= curve_time_s(curve, nbytes) * (1 + 1e-12)
    assert math.isfinite(curve_time_s(faster, nbytes))


def test_what_if_faster_link_on_a_spec_speeds_up_measured_curves() -> None:
    base = load_gpu("h100_sxm")
    faster = dataclasses.replace(base, nvlink_bw_bytes_per_s=2 * base.nvlink_bw_bytes_per_s)
    slow, fast = load_collectives(base, 8), load_collectives(faster, 8)
    assert not slow.curves["all_reduce"].derived and fast.curves["all_reduce"].derived
    for nbytes in (1e3, 1e6, 1e9):
        assert collective_time_s(fast, "all_reduce", nbytes) <= collective_time_s(slow, "all_reduce", nbytes)
    # at 512 MiB the bandwidth term dominates: close to half the time (floor 15.6 µs stays)
    big = 536_870_912
    ratio = collective_time_s(fast, "all_reduce", big) / collective_time_s(slow, "all_reduce", big)
    assert 0.5 < ratio < 0.52


def test_pcie_what_if_all_reduce_paths() -> None:
    c = load_collectives("rtx_pro_6000_server", 8)
    assert set(c.alternatives) == {"pcie_oneshot", "nccl_tuned"}
    # R6K-ONESHOT (reference §2d): one-shot 7.5 µs at 1 KB and 25.9 µs at 64 KB on 8 GPUs
    assert collective_time_s(c, "all_reduce", 1024, backend="pcie_oneshot") == pytest.approx(7.5e-6)
    assert collective_time_s(c, "all_reduce", 65536, backend="pcie_oneshot") == pytest.approx(25.9e-6)
    # R6K-NCCL best large-message busbw 41.1 GB/s: t = 2(n-1)/n · bytes / busbw at 512 MiB
    want = 1.75 * 536_870_912 / 41.1e9
    assert collective_time_s(c, "all_reduce", 536_870_912, backend="nccl_tuned") == pytest.approx(want, rel=1e-3)
    for backend in c.alternatives:
        times = [collective_time_s(c, "all_reduce", b, backend=backend) for b in SIZES]
        nccl = [collective_time_s(c, "all_reduce", b) for b in SIZES]
        assert all(t <= n for t, n in zip(times, nccl, strict=True))
        assert all(b >= a for a, b in zip(times, times[1:], strict=False))
    nvlink = load_collectives("h100_sxm", 8)
    assert nvlink.alternatives == {}
    with pytest.raises(ScenarioError):
        collective_time_s(nvlink, "all_reduce", 1024, backend="pcie_oneshot")
    assert load_collectives("rtx_4090", 8).alternatives == {}  # no P2P: no one-shot
