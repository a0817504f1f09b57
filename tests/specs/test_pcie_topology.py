"""The PCIe topology as data (specs.pcie_topology, issue 28): presets with sources, the link geometry a collective's
cost needs (checked by hand and against a measured all-to-all score), and the `nvidia-smi topo -m` reader on real
outputs (tests/data/specs/PROVENANCE.md) and on files that are not such output."""

from __future__ import annotations

from pathlib import Path

import pytest

from servescope.errors import BadConfig, UnknownName
from servescope.specs.pcie_topology import (
    default_topology_name,
    load_pcie_topology,
    pcie_topology_names,
    read_topo_matrix,
)

DATA = Path(__file__).parents[1] / "data" / "specs"
GEN5 = 64e9  # bytes/s per direction of a PCIe Gen5 x16 GPU link (the rtx_pro_6000_server spec)
LINK = GEN5 * 0.86  # × measured P2P efficiency (R6K-PCIE p2pmark link score)
SOCKET = 49.5e9  # Turin inter-socket fabric per direction (the data file's source)


def test_presets_carry_a_source_and_the_default_is_one_of_them() -> None:
    names = pcie_topology_names()
    assert {"switch-2x4", "switch-4x2", "switch-1x8", "direct-2socket", "direct-4"} <= set(names)
    assert default_topology_name() in names
    for name in names:
        t = load_pcie_topology(name)
        assert t.source and t.n_gpus == sum(len(s) for s in t.switches)
        assert sorted(g for s in t.switches for g in s) == list(range(t.n_gpus))


def test_an_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UnknownName, match="switch-2x4"):
        load_pcie_topology("switch-9x9")


def test_one_shot_traffic_on_two_switches_is_bound_by_the_uplinks() -> None:
    """8 GPUs, 4 behind each switch, x bytes between every pair: a GPU link carries 7x, an uplink 4·4 = 16x."""
    t, x = load_pcie_topology("switch-2x4"), 1e6
    assert t.all_to_all_s(x, GEN5) == pytest.approx(16 * x / LINK)
    one = load_pcie_topology("switch-1x8")  # nothing leaves the switch: the GPU's own link, 7x
    assert one.all_to_all_s(x, GEN5) == pytest.approx(7 * x / LINK)
    four = load_pcie_topology("switch-4x2")  # 2 behind each of 4 switches: 2·6 = 12x on an uplink
    assert four.all_to_all_s(x, GEN5) == pytest.approx(12 * x / LINK)


def test_two_sockets_are_bound_by_the_fabric_as_measured() -> None:
    """direct-2socket: 4·4 = 16x over the fabric. The aggregate all-to-all rate 8·7·x / t = 3.5 × 49.5 GB/s is
    what p2pmark measured on that box: dense score 173.1 GB/s for 8 GPUs (R6K-PCIE, Festr dual Turin)."""
    t, x = load_pcie_topology("direct-2socket"), 1e6
    seconds = t.all_to_all_s(x, GEN5)
    assert seconds == pytest.approx(16 * x / SOCKET)
    assert 8 * 7 * x / seconds / 1e9 == pytest.approx(173.1, rel=0.02)


def test_the_ring_crosses_the_slowest_link() -> None:
    assert load_pcie_topology("switch-2x4").ring_bw(GEN5) == pytest.approx(LINK)
    assert load_pcie_topology("direct-2socket").ring_bw(GEN5) == pytest.approx(SOCKET)
    assert load_pcie_topology("switch-1x8").ring_bw(GEN5) == pytest.approx(LINK)


def test_a_tp_group_takes_the_first_gpus() -> None:
    box = load_pcie_topology("switch-2x4")
    assert box.group(4).switches == ((0, 1, 2, 3),)  # one switch: no uplink traffic
    assert box.group(4).all_to_all_s(1e6, GEN5) == pytest.approx(3 * 1e6 / LINK)
    assert box.group(6).switches == ((0, 1, 2, 3), (4, 5))
    with pytest.raises(BadConfig, match="8 GPUs"):
        box.group(16)


def test_reads_switches_from_a_real_topo_matrix() -> None:
    t = read_topo_matrix(DATA / "topo_rtx6kpro_switches.txt")
    assert t.switches == ((0, 1, 2, 3), (4, 5, 6, 7)) and len(set(t.sockets)) == 1
    preset = load_pcie_topology("switch-2x4")
    assert t.all_to_all_s(1e6, GEN5) == pytest.approx(preset.all_to_all_s(1e6, GEN5))


def test_reads_sockets_from_sys_cells() -> None:
    t = read_topo_matrix(DATA / "topo_rtx6kpro_dual_cpu.txt")
    assert t.switches == tuple((g,) for g in range(8))  # PHB: each GPU on its own root port
    assert t.sockets[:4] == (t.sockets[0],) * 4 and t.sockets[4:] == (t.sockets[4],) * 4
    assert t.sockets[0] != t.sockets[4]
    assert t.ring_bw(GEN5) == pytest.approx(SOCKET)


def test_reads_tabs_affinity_columns_and_the_legend() -> None:
    t = read_topo_matrix(DATA / "topo_club3090_2x5090.txt")
    assert t.switches == ((0,), (1,)) and t.sockets == (0, 0) and not t.fully_nvlinked()


def test_nvlink_between_every_pair_is_seen(tmp_path: Path) -> None:
    f = tmp_path / "nv.txt"
    f.write_text("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
                 "GPU0\t X \tNV4\tNV4\t0-31\t0\nGPU1\tNV4\t X \tNV4\t0-31\t0\nGPU2\tNV4\tNV4\t X \t0-31\t0\n")
    assert read_topo_matrix(f).fully_nvlinked()
    f.write_text("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV4\tPHB\nGPU1\tNV4\t X \tPHB\nGPU2\tPHB\tPHB\t X \n")
    assert not read_topo_matrix(f).fully_nvlinked()


@pytest.mark.parametrize(("text", "says"), [
    ("", "no header"),
    ('{"GPU0": 1}', "no header"),
    ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "cell 'FOO'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tSYS\t X \n", "GPU0/GPU1 is PIX"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\n", "rows GPU0..GPU1"),
    ("\tGPU0\tGPU1\nGPU0\tPIX\tPIX\nGPU1\tPIX\t X \n", "not X"),
    ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tPIX\t X \n", "has 1 cells"),
])
def test_a_file_that_is_not_topo_m_output_says_so_naming_it(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "box.txt"
    f.write_text(text)
    with pytest.raises(BadConfig) as e:
        read_topo_matrix(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and "not nvidia-smi topo -m output" in msg and says in msg


def test_a_peer_access_matrix_is_not_a_topology(tmp_path: Path) -> None:
    """`nvidia-smi topo -p2p rw` looks alike (GPU0.. rows) but holds OK/GNS cells: refused, naming the file."""
    f = DATA / "topo_p2p_club3090_not_topo_m.txt"
    with pytest.raises(BadConfig, match="not nvidia-smi topo -m output.*GNS"):
        read_topo_matrix(f)
    for bad in (tmp_path / "missing.txt", tmp_path):  # no file, a folder
        with pytest.raises(BadConfig, match=str(bad)):
            read_topo_matrix(bad)
