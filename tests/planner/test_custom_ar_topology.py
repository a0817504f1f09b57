"""Custom all-reduce priced as the engine runs it, on the box's PCIe links (issue 28): the engine's own gate first,
then the engine's per-message path (no min() with NCCL), one-shot and two-shot bounded by the switch uplinks.
Expected values are computed here from the formula's inputs, not read back from the code."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.perfmodel import Efficiency
from servescope.perfmodel.scenario import Scenario
from servescope.planner import plan
from servescope.planner.allreduce_paths import engine_path, patched_rule
from servescope.specs.collectives import load_collectives

DATA = Path(__file__).parents[1] / "data" / "specs"
KIMI = dict(model="kimi-k2.5", gpu="rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16")
LINK = 64e9 * 0.86  # a Gen5 x16 GPU link × measured P2P efficiency (R6K-PCIE), bytes/s per direction
MSG_C128 = 7168 * 2 * 128  # Kimi's hidden size × BF16 × 128 tokens: 1.75 MiB per all-reduce
ONESHOT_FLOOR_8 = 7.5e-6  # R6K-ONESHOT, 8 GPUs


def _car(concurrency: int, **kw: object) -> object:
    sc = Scenario.build(**{**KIMI, **kw})  # type: ignore[arg-type]
    return plan(sc, concurrency=concurrency).track("custom_allreduce")


@pytest.mark.parametrize(("rule", "n", "nbytes", "path"), [
    ("vllm", 8, 14336, "one_shot"), ("vllm", 8, 256 * 1024 - 1, "one_shot"), ("vllm", 8, 256 * 1024, "two_shot"),
    ("vllm", 4, 500 * 1024, "one_shot"), ("vllm", 4, 512 * 1024, "two_shot"), ("vllm", 2, 4 << 20, "one_shot"),
    ("vllm", 8, 8 << 20, "nccl"), ("fork", 8, 56 * 1024 - 1, "one_shot"), ("fork", 8, 56 * 1024, "nccl"),
])
def test_the_engine_rule_picks_the_kernel_by_size(rule: str, n: int, nbytes: int, path: str) -> None:
    """vLLM csrc/custom_all_reduce.cuh: one-shot below 512 KiB (≤4 GPUs) / 256 KiB (≤8), two-shot to 8 MiB; the
    fork's cpp backend: one-shot below 56 KiB, NCCL above."""
    assert engine_path(rule, n, nbytes) == path


def test_the_build_label_names_the_rule() -> None:
    assert patched_rule("") is None and patched_rule("cu128") is None
    assert patched_rule("pcie-ar") == "vllm" and patched_rule("cu128.pcie-ar-cpp") == "fork"


@pytest.mark.parametrize("tp", [4, 8])
def test_stock_vllm_refuses_it_on_more_than_two_pcie_gpus_with_its_rule(tp: int) -> None:
    t = _car(1, tp=tp, check_memory=False)
    assert not t.applicable and t.gain is None  # type: ignore[attr-defined]
    why = t.why_not or ""  # type: ignore[attr-defined]
    assert "not supported on more than two PCIe-only GPUs" in why and "custom_all_reduce.py" in why
    assert "symmetric-memory" in why and "+pcie-ar" in why  # SM120 has no symm-mem sizes; how to name a build


def test_the_build_label_changes_no_curve() -> None:
    """`+pcie-ar` is the newest release with a patched build: the same baseline as no version (issue 28: a
    pinned 0.14.0 had priced the box off its curves, 14.3 vs 10.7 ms)."""
    def tpot(version: str) -> float:
        return plan(Scenario.build(**KIMI, engine_version=version), concurrency=1).baseline.tpot_s  # type: ignore[arg-type]

    assert tpot("+pcie-ar") == tpot("") == tpot("latest")
    assert tpot("0.24.0+pcie-ar") == tpot("0.24.0")


def test_at_c128_the_two_shot_path_loses_on_a_two_switch_box() -> None:
    """1.75 MiB is two-shot territory for vLLM at 8 GPUs. Two-shot on 4+4 switches: each pair moves 2·B/8, an
    uplink 4·4 of them; NCCL's ring moves 2·7/8·B over each link once. Ratio custom / ring > 1: a loss."""
    t = _car(128, engine_version="+pcie-ar", pcie_topology="switch-2x4")
    nccl_floor = load_collectives("rtx_pro_6000_server", 8).curves["all_reduce"].latency_floor_s
    two_shot = 2 * ONESHOT_FLOOR_8 + 16 * (2 * MSG_C128 / 8) / LINK
    ring = nccl_floor + 2 * 7 / 8 * MSG_C128 / LINK
    assert t.details["path"] == "two_shot"  # type: ignore[attr-defined]
    assert t.details["all_reduce_ratio"] == pytest.approx(two_shot / ring, rel=1e-6)  # type: ignore[attr-defined]
    assert two_shot / ring > 1.0 and t.gain < 1.0  # type: ignore[attr-defined]


def test_without_a_topology_the_default_box_prices_the_same_loss() -> None:
    named = _car(128, engine_version="+pcie-ar", pcie_topology="switch-2x4")
    default = _car(128, engine_version="+pcie-ar")
    assert default.gain == pytest.approx(named.gain) and default.gain < 1.0  # type: ignore[attr-defined]
    assert "default" in default.details["source"]  # type: ignore[attr-defined]


def test_one_switch_for_all_eight_removes_the_uplink_bound() -> None:
    t = _car(128, engine_version="+pcie-ar", pcie_topology="switch-1x8")
    nccl_floor = load_collectives("rtx_pro_6000_server", 8).curves["all_reduce"].latency_floor_s
    two_shot = 2 * ONESHOT_FLOOR_8 + 7 * (2 * MSG_C128 / 8) / LINK  # the GPU's own link: 7 peers
    ring = nccl_floor + 2 * 7 / 8 * MSG_C128 / LINK
    assert t.details["all_reduce_ratio"] == pytest.approx(two_shot / ring, rel=1e-6)  # type: ignore[attr-defined]


def test_the_forks_cutoff_keeps_nccl_at_c128_and_one_shot_at_c1() -> None:
    big, small = _car(128, engine_version="+pcie-ar-cpp"), _car(1, engine_version="+pcie-ar-cpp")
    assert big.details["path"] == "nccl" and big.details["all_reduce_ratio"] == 1.0  # type: ignore[attr-defined]
    assert big.gain == pytest.approx(1.0)  # type: ignore[attr-defined]
    assert small.details["path"] == "one_shot" and small.gain > 1.0  # type: ignore[attr-defined]


def test_at_c1_one_shot_on_the_measured_curve_where_no_topology_is_named() -> None:
    """14 KiB is one-shot; the measured curve (R6K-ONESHOT, 8 GPUs) covers it: ratio = that curve over NCCL's."""
    from servescope.specs.collectives import curve_time_s

    curves = load_collectives("rtx_pro_6000_server", 8)
    one = float(curve_time_s(curves.alternatives["pcie_oneshot"], 7168 * 2))
    nccl = float(curve_time_s(curves.curves["all_reduce"], 7168 * 2))
    t = _car(1, engine_version="+pcie-ar", efficiency=Efficiency())  # collective scales 1
    assert t.details["path"] == "one_shot"  # type: ignore[attr-defined]
    assert t.details["all_reduce_ratio"] == pytest.approx(one / nccl, rel=0.02)  # type: ignore[attr-defined]


def test_the_cli_reads_a_topology_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    args = ["plan", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
            "int4-w4a16", "--engine-version", "+pcie-ar", "--concurrency", "128", "--json"]
    for name, preset in (("topo_rtx6kpro_switches.txt", "switch-2x4"), ("topo_rtx6kpro_dual_cpu.txt",
                                                                           "direct-2socket")):
        r = CliRunner().invoke(main, [*args, "--topology", str(DATA / name)])
        assert r.exit_code == 0, r.output
        car = next(t for t in json.loads(r.output)["tracks"] if t["kind"] == "custom_allreduce")
        same = _car(128, engine_version="+pcie-ar", pcie_topology=preset)  # the file's geometry is the preset's
        assert car["gain"] == pytest.approx(same.gain) and car["gain"] < 1.0  # type: ignore[attr-defined]
    bad = tmp_path / "topo.txt"
    bad.write_text("hello\n")
    r = CliRunner().invoke(main, [*args, "--topology", str(bad)])
    assert r.exit_code == 1 and str(bad) in r.output and "not nvidia-smi topo -m output" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, [*args, "--topology", str(bad), "--pcie-topology", "switch-2x4"])
    assert r.exit_code != 0 and "not both" in r.output


def test_a_ledger_pair_of_custom_allreduce_is_priced_on_its_topology(tmp_path: Path) -> None:
    """A measured custom all-reduce pair ran a build that allowed it: priced, on the row's pcie_topology; a
    kernel_us row reads the per-call ratio inverted (planner.pair_check)."""
    from servescope.planner.pair_check import check_pairs
    from servescope.validation.pairs import COLUMNS

    row = dict(id="car", backend="vllm", model_path="kimi-k2.5", system="rtx_pro_6000_server", isl="1024",
               osl="512", batch_size="128", tp_size="8", pp_size="1", attention_dp_size="1", moe_ep_size="1",
               moe_quant_mode="int4-w4a16", track="custom_allreduce", setting="custom AR vs NCCL",
               metric="kernel_us", before="200", after="300", source="https://example.org/x",
               pcie_topology="switch-2x4")
    path = tmp_path / "l.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow({c: row.get(c, "") for c in COLUMNS})
    (check,) = check_pairs(path)
    ratio = _car(128, engine_version="+pcie-ar", pcie_topology="switch-2x4").details["all_reduce_ratio"]  # type: ignore[attr-defined]
    assert check.prediction.gain == pytest.approx(1.0 / ratio, rel=1e-6) and check.prediction.gain < 1.0


def test_the_switch_physics_puts_the_crossover_where_it_was_measured() -> None:
    """Not fitted: on switch-2x4 one-shot beats the NCCL ring at 32 KiB and loses at 64 KiB, as R6K-ONESHOT /
    R6K-NCCL measured on a switch box (16.5 vs 24.5 µs at 32 KB, 25.9 vs 24.1 µs at 64 KB)."""
    from servescope.planner.allreduce_paths import TopologyAllReduce
    from servescope.specs.pcie_topology import load_pcie_topology

    floor = load_collectives("rtx_pro_6000_server", 8).curves["all_reduce"].latency_floor_s
    physics = TopologyAllReduce(load_pcie_topology("switch-2x4"), 64e9, floor)
    for kib, wins in ((32, True), (64, False)):
        b = kib * 1024
        one, ring = ONESHOT_FLOOR_8 + 16 * b / LINK, floor + 2 * 7 / 8 * b / LINK  # by hand
        assert physics.ratio("one_shot", b) == pytest.approx(one / ring)
        assert (one < ring) is wins
