"""PCIe topology of a multi-GPU box as data: which GPUs share a PCIe switch, each switch's uplink, the sockets.

Does: `load_pcie_topology(name)` returns a named preset of specs/data/pcie_topology.toml (a source per preset and per
number); `read_topo_matrix(path)` reads `nvidia-smi topo -m` output (the matrix of GPU0.. rows with X / NV# / PIX /
PXB / PHB / NODE / SYS cells, optional NIC columns, CPU / NUMA affinity columns and the legend) into the same type:
GPUs joined by PIX or PXB share a switch; NUMA affinity (else the SYS cells) gives the sockets. A file that is not
such output raises BadConfig in one line naming the file.
The geometry a collective's cost needs, per direction of each link (bytes / bandwidth = seconds):
  all_to_all_s(x)   every GPU of the group sends x bytes to every other (one-shot all-reduce: x = message bytes;
                    two-shot: x = 2 · bytes / n). Loads: a GPU's own link (n−1)·x; a switch uplink with k of the n
                    GPUs behind it k·(n−k)·x (traffic between its GPUs and the rest); the socket fabric, with m GPUs
                    on one side, m·(n−m)·x. Time = max over links of load / bandwidth: the busiest link sets it.
                    Check (tests): direct-2socket gives 8·7·49.5/16 = 173 GB/s of all-to-all, the measured p2pmark
                    dense score of that box 173.1 GB/s (R6K-PCIE).
  ring_bw()         the bandwidth of the slowest link a ring all-reduce crosses (an NCCL ring ordered by switch
                    crosses every GPU link, each outside-going uplink and the socket fabric once per direction, each
                    carrying 2(n−1)/n · bytes): the GPU link, an uplink, or the fabric.
Bandwidths: a GPU's link = its x16 PCIe bandwidth (specs.hardware) × the measured P2P efficiency 0.86 (R6K-PCIE);
an uplink of L lanes = that × L / 16; the socket fabric 49.5 GB/s per direction (file: sources).
Does not: price a collective (planner.allreduce_paths does), read `topo -p2p` (P2P support), model PCIe switch
ACS redirection or the latency of a hop (the all-reduce floors are measured whole).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from servescope._paths import read_text
from servescope.errors import BadConfig, UnknownName
from servescope.specs.tables import read_toml

_FILE = "pcie_topology.toml"
_CELL = re.compile(r"^(X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")
MAX_BYTES = 1024 * 1024  # a topology matrix is a few KB; anything bigger is not one


@dataclass(frozen=True)
class PcieTopology:
    """GPUs (CUDA order) grouped behind switches, each switch on a socket. A GPU alone in its group sits on its own
    root port (its uplink is its link). `nvlink` lists the GPU pairs joined by NVLink (nvidia-smi NV#)."""

    name: str
    switches: tuple[tuple[int, ...], ...]
    sockets: tuple[int, ...]  # socket of each switch
    uplink_lanes: int
    p2p_efficiency: float
    socket_bw_bytes_per_s: float
    source: str
    nvlink: tuple[tuple[int, int], ...] = ()

    @property
    def n_gpus(self) -> int:
        return sum(len(s) for s in self.switches)

    def group(self, n: int) -> PcieTopology:
        """The topology of GPUs 0..n−1 (a TP group of n on the engine's default devices); BadConfig if n > GPUs."""
        if n > self.n_gpus:
            raise BadConfig(f"PCIe topology {self.name}: {self.n_gpus} GPUs, fewer than the {n} of the TP group")
        kept = [(tuple(g for g in sw if g < n), sock) for sw, sock in zip(self.switches, self.sockets, strict=True)]
        kept = [(sw, sock) for sw, sock in kept if sw]
        return replace(self, switches=tuple(sw for sw, _ in kept), sockets=tuple(sock for _, sock in kept),
                       nvlink=tuple(p for p in self.nvlink if max(p) < n))

    def fully_nvlinked(self) -> bool:
        """NVLink between every pair of GPUs (vLLM's `fully_connected`)."""
        n = self.n_gpus
        return n > 1 and len({tuple(sorted(p)) for p in self.nvlink}) == n * (n - 1) // 2

    def link_bw(self, gpu_pcie_bw: float) -> float:
        """A GPU's P2P link bandwidth, bytes/s per direction: x16 PCIe bandwidth × measured P2P efficiency."""
        return gpu_pcie_bw * self.p2p_efficiency

    def all_to_all_s(self, per_pair_bytes: float, gpu_pcie_bw: float) -> float:
        """Seconds for every GPU to send `per_pair_bytes` to every other GPU of this topology: max over links of
        load / bandwidth (module docstring: GPU link (n−1)·x, uplink k(n−k)·x, socket fabric m(n−m)·x)."""
        n, link = self.n_gpus, self.link_bw(gpu_pcie_bw)
        uplink = link * self.uplink_lanes / 16
        loads = [((n - 1) * per_pair_bytes, link)]
        loads += [(len(sw) * (n - len(sw)) * per_pair_bytes, uplink) for sw in self.switches]
        loads += [(m * (n - m) * per_pair_bytes, self.socket_bw_bytes_per_s) for m in self._per_socket()]
        return max(load / bw for load, bw in loads)

    def ring_bw(self, gpu_pcie_bw: float) -> float:
        """Bytes/s of the slowest link an NCCL ring over these GPUs crosses (module docstring)."""
        link = self.link_bw(gpu_pcie_bw)
        bws = [link]
        if len(self.switches) > 1:
            bws.append(link * self.uplink_lanes / 16)
        if len(self._per_socket()) > 1:
            bws.append(self.socket_bw_bytes_per_s)
        return min(bws)

    def _per_socket(self) -> list[int]:
        counts: dict[int, int] = {}
        for sw, sock in zip(self.switches, self.sockets, strict=True):
            counts[sock] = counts.get(sock, 0) + len(sw)
        return list(counts.values())

    def describe(self) -> str:
        """'switch-2x4 (8 GPUs: 4+4 behind 2 switches, 1 socket)'."""
        sizes = "+".join(str(len(s)) for s in self.switches)
        return (f"{self.name} ({self.n_gpus} GPUs: {sizes} behind {len(self.switches)} switch"
                f"{'es' if len(self.switches) > 1 else ''}/root ports, {len(set(self.sockets))} socket"
                f"{'s' if len(set(self.sockets)) > 1 else ''})")


@cache
def _data() -> dict[str, Any]:
    return read_toml(_FILE)


def _number(doc: dict[str, Any], section: str, key: str) -> float:
    value = doc.get(section, {}).get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise BadConfig(f"specs/data/{_FILE}: field {section}.{key}: expected a positive number, got {value!r}")
    return float(value)


def pcie_topology_names() -> list[str]:
    """The preset names of specs/data/pcie_topology.toml."""
    return sorted(_data().get("preset", {}))


def default_topology_name() -> str:
    """The preset priced when a PCIe deployment names none (the file's [default], with its source)."""
    return str(_data()["default"]["name"])


def load_pcie_topology(name: str) -> PcieTopology:
    """A named preset; UnknownName listing the known ones, BadConfig naming the field of a malformed preset."""
    doc = _data()
    presets = doc.get("preset", {})
    if name not in presets:
        raise UnknownName(f"unknown PCIe topology {name!r}; known: {', '.join(pcie_topology_names())}")
    p = presets[name]
    where = f"specs/data/{_FILE}: preset {name}"
    switches, sockets = p.get("switches"), p.get("sockets")
    if (not isinstance(switches, list) or not switches
            or not all(isinstance(s, list) and s and all(isinstance(g, int) for g in s) for s in switches)):
        raise BadConfig(f"{where}: field switches: expected a list of GPU-number lists")
    if not isinstance(sockets, list) or len(sockets) != len(switches):
        raise BadConfig(f"{where}: field sockets: expected one socket per switch")
    gpus = sorted(g for s in switches for g in s)
    if gpus != list(range(len(gpus))):
        raise BadConfig(f"{where}: field switches: GPUs must be 0..n-1, each once")
    if not p.get("source"):
        raise BadConfig(f"{where}: field source: missing")
    return PcieTopology(name, tuple(tuple(s) for s in switches), tuple(int(x) for x in sockets),
                        int(p.get("uplink_lanes", 16)), _number(doc, "p2p", "efficiency"),
                        _number(doc, "socket", "bw_gbps") * 1e9, str(p["source"]))


def read_topo_matrix(path: str | Path) -> PcieTopology:
    """`nvidia-smi topo -m` output as a PcieTopology (module docstring); BadConfig naming the file otherwise."""
    p = Path(path)
    text = _ANSI.sub("", read_text(p, "nvidia-smi topo -m output", BadConfig, MAX_BYTES))
    lines = [ln.rstrip() for ln in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"]), None)
    if header_at is None:
        raise BadConfig(f"{p}: not nvidia-smi topo -m output (no header line starting with GPU0)")
    columns = []
    for token in lines[header_at].split():
        if not _DEVICE.match(token):
            break
        columns.append(token)
    rows: dict[int, list[str]] = {}
    for ln in lines[header_at + 1:]:
        cells = ln.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            if rows:
                break
            continue
        rows[int(cells[0][3:])] = cells[1:]
    n = sum(1 for c in columns if c.startswith("GPU"))
    if n == 0 or sorted(rows) != list(range(n)) or columns[:n] != [f"GPU{i}" for i in range(n)]:
        raise BadConfig(f"{p}: not nvidia-smi topo -m output (expected rows GPU0..GPU{max(n - 1, 0)} under the "
                        "GPU0.. header)")
    matrix = [_row(p, i, rows[i], len(columns), n) for i in range(n)]
    numa = [_numa(rows[i], len(columns)) for i in range(n)]
    return _topology(p, matrix, numa)


def _row(p: Path, i: int, cells: list[str], width: int, n: int) -> list[str]:
    if len(cells) < width:
        raise BadConfig(f"{p}: not nvidia-smi topo -m output (row GPU{i} has {len(cells)} cells, the header "
                        f"{width} devices)")
    row = cells[:n]
    bad = next((c for c in row if not _CELL.match(c)), None)
    if bad is not None or row[i] != "X":
        what = f"cell {bad!r}" if bad is not None else f"cell GPU{i}/GPU{i} is {row[i]!r}, not X"
        raise BadConfig(f"{p}: not nvidia-smi topo -m output (row GPU{i}: {what}; expected X, NV#, PIX, PXB, "
                        "PHB, NODE or SYS)")
    return row


def _numa(cells: list[str], width: int) -> int | None:
    """The NUMA affinity column (after the CPU affinity one), when present and a number."""
    rest = cells[width:]
    return int(rest[1]) if len(rest) >= 2 and rest[1].isdigit() else None


def _topology(p: Path, matrix: list[list[str]], numa: list[int | None]) -> PcieTopology:
    n = len(matrix)
    for i in range(n):
        for j in range(n):
            if matrix[i][j] != matrix[j][i]:
                raise BadConfig(f"{p}: not nvidia-smi topo -m output (GPU{i}/GPU{j} is {matrix[i][j]} but "
                                f"GPU{j}/GPU{i} is {matrix[j][i]})")
    switch = _components(n, lambda i, j: matrix[i][j] in ("PIX", "PXB"))
    if all(x is not None for x in numa):
        socket_of_gpu = [int(x or 0) for x in numa]
    else:  # no NUMA column: GPUs not separated by SYS share a socket
        socket_of_gpu = _components(n, lambda i, j: matrix[i][j] != "SYS")
    groups: dict[int, list[int]] = {}
    for g in range(n):
        groups.setdefault(switch[g], []).append(g)
    switches = tuple(tuple(v) for _, v in sorted(groups.items()))
    doc = _data()
    nvlink = tuple((i, j) for i in range(n) for j in range(i + 1, n) if matrix[i][j].startswith("NV"))
    return PcieTopology(f"file {p.name}", switches, tuple(socket_of_gpu[s[0]] for s in switches), 16,
                        _number(doc, "p2p", "efficiency"), _number(doc, "socket", "bw_gbps") * 1e9,
                        f"nvidia-smi topo -m output {p}", nvlink)


def _components(n: int, joined: Any) -> list[int]:
    """Connected components of GPUs 0..n−1 under `joined(i, j)`: the smallest GPU number of each one's group."""
    label = list(range(n))

    def root(i: int) -> int:
        while label[i] != i:
            i = label[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if joined(i, j):
                a, b = root(i), root(j)
                label[max(a, b)] = min(a, b)
    return [root(i) for i in range(n)]
