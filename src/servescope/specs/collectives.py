"""Collective-communication curves per GPU system: measured where published, derived (and labelled) elsewhere.

What it does: `load_collectives(gpu, n_gpus)` returns, for each collective (all_reduce, all_gather,
reduce_scatter, all_to_all, send_recv, broadcast), a latency floor (s), a bus bandwidth (bytes/s) and, where
measured, the message-size curve itself; plus whether vLLM's custom all-reduce is allowed, and why.
`collective_time_s` turns a curve into a time. Data: `specs/data/collectives/<system>.toml` (measured
nccl-tests and vLLM CUDA-graph all-reduce from aiconfigurator, AIC-COMM), `community.toml` (PCIe one-shot and
tuned-NCCL all-reduce what-ifs, R6K) and `rules.toml` (derivation rules).
What it does not do: inter-node collectives, rank skew (measured floors are isolated-kernel floors; in-situ
collectives also wait for the slowest rank), overlap with compute.

Which curve is used, in order (the curve's `source` says which, and `derived` is True unless measured):
1. the system's own measurement at n GPUs (newest NCCL / vLLM version bundled);
2. the same system's measurement at the next larger measured GPU count (conservative: more hops);
3. a proxy system's measurement (rules.toml: GB200 → B200, PCIe with P2P → RTX PRO 6000 SE), with the
   bandwidth term rescaled: t(b) = floor + (t_proxy(b) − floor) · bw_proxy / bw_gpu;
4. beyond the largest measured count m: two-parameter form, floor scaled by (n−1)/(m−1) (ring hops), bus
   bandwidth kept;  PCIe without P2P, send/recv and broadcast: two-parameter forms from rules.toml.
Message bytes follow nccl-tests' "size": the per-rank tensor for all_reduce, the gathered output for
all_gather, the input for reduce_scatter, the per-rank send buffer for all_to_all.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from servescope import units
from servescope.errors import BadConfig, ScenarioError
from servescope.specs import tables
from servescope.specs.hardware import GpuSpec, load_gpu, parse_value_entry

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast")
_MEASURED = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
INTERCONNECTS = ("nvlink", "pcie", "pcie_p2p", "pcie_no_p2p", "as_measured")
_ALTERNATIVES = ("pcie_oneshot", "nccl_tuned")
_DATA = "specs/data/collectives"


def bus_factor(collective: str, n_gpus: int) -> float:
    """nccl-tests bus-bandwidth factor: all_reduce 2(n−1)/n; all_gather, reduce_scatter, all_to_all (n−1)/n;
    broadcast and send_recv 1. Time = factor · bytes / bus bandwidth (plus the latency floor)."""
    if collective == "all_reduce":
        return 2 * (n_gpus - 1) / n_gpus
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n_gpus - 1) / n_gpus
    if collective in ("broadcast", "send_recv"):
        return 1.0
    raise ScenarioError(f"unknown collective '{collective}'; known: {', '.join(COLLECTIVES)}")


@dataclass(frozen=True)
class CollectiveCurve:
    """One collective at one GPU count. `message_bytes`/`time_s` hold measured points (monotone envelope,
    see `collective_time_s`) or are empty when the two-parameter form applies."""

    collective: str
    n_gpus: int                      # the GPU count the numbers describe (may exceed the requested one)
    latency_floor_s: float
    bus_bw_bytes_per_s: float
    source: str
    derived: bool
    message_bytes: tuple[float, ...] = ()
    time_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class CollectiveCurves:
    """Collectives of `n_gpus` GPUs of one kind over `interconnect` (nvlink, pcie_p2p, pcie_no_p2p)."""

    gpu: str
    n_gpus: int
    interconnect: str
    curves: dict[str, CollectiveCurve]       # NCCL, keyed by COLLECTIVES
    vllm_all_reduce: CollectiveCurve         # vLLM's all-reduce in a CUDA graph (custom AR where allowed)
    custom_allreduce_available: bool
    custom_allreduce_reason: str
    custom_allreduce_max_bytes: float
    sources: dict[str, str] = field(default_factory=dict)
    # What-if all-reduce paths (PCIe with P2P only): "pcie_oneshot" (community one-shot custom AR),
    # "nccl_tuned" (community-tuned NCCL); see community.toml. Used through collective_time_s(backend=...).
    alternatives: dict[str, CollectiveCurve] = field(default_factory=dict)


def monotone_fit(times_s: list[float]) -> list[float]:
    """Least-squares non-decreasing fit of log(time) (pool-adjacent-violators), back in seconds.

    Why: a larger message never costs less in the model, but measured curves wobble (H100 custom AR: 4 KB
    5.55 µs > 8 KB 5.11 µs) and dip where NCCL switches protocol (RTX PRO 6000, 8 GPUs: 512 KB 156 µs >
    1 MB 132 µs, reference §2a). Pooling replaces each violating run by its geometric mean, so noise is
    averaged rather than the worst (or best) point kept."""
    blocks: list[list[float]] = []  # [sum of log t, count]
    for value in np.log(np.asarray(times_s, dtype=float)).tolist():
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [math.exp(total / count) for total, count in blocks for _ in range(int(count))]


def _points_curve(collective: str, n: int, nbytes: list[float], times_s: list[float], source: str,
                  derived: bool, bw_scale: float = 1.0) -> CollectiveCurve:
    t = np.asarray(monotone_fit(times_s))
    floor = float(t[0])
    t = floor + (t - floor) * bw_scale
    t = np.maximum.accumulate(np.maximum(t, floor))  # rounding guard: keep t[0] the minimum, t non-decreasing
    busbw = bus_factor(collective, n) * nbytes[-1] / float(t[-1])
    return CollectiveCurve(collective, n, floor, busbw, source, derived, tuple(nbytes), tuple(t.tolist()))


@cache
def _load_data() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """rules.toml, and every measured <system>.toml keyed by system."""
    root = tables.DATA / "collectives"
    rules: dict[str, Any] = {}
    systems: dict[str, dict[str, Any]] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        path = f"{_DATA}/{entry.name}"
        try:
            doc = tomllib.loads(entry.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise BadConfig(f"{path}: malformed TOML: {exc}") from exc
        if entry.name == "rules.toml":
            rules = doc
            continue
        doc = _check_system(path, doc)
        known = systems.setdefault(doc["system"], {**doc, "curve": []})
        if known["interconnect"] != doc["interconnect"]:  # community.toml adds curves to a system
            raise BadConfig(f"{path}: interconnect differs from another file for {doc['system']}")
        known["curve"].extend(doc.get("curve", []))
    return rules, systems


def _check_system(path: str, doc: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(doc.get("system"), str) or doc.get("interconnect") not in INTERCONNECTS:
        raise BadConfig(f"{path}: needs 'system' and an 'interconnect' in {', '.join(INTERCONNECTS)}")
    for c in doc.get("curve", []):
        b, t = c.get("message_bytes", []), c.get("latency_us", [])
        if not b or len(b) != len(t) or list(b) != sorted(b) or not c.get("source") or min(t) <= 0:
            raise BadConfig(f"{path}: curve {c.get('collective')} n={c.get('n_gpus')} is malformed")
    return doc


def _rule(*keys: str) -> tuple[float, str]:
    """A `[a.b]` number of rules.toml in SI, with its source."""
    table: Any = _load_data()[0]
    for k in keys:
        table = table.get(k, {}) if isinstance(table, dict) else {}
    value, source = parse_value_entry(f"{_DATA}/rules.toml", ".".join(keys), table)
    return float(value), source


def _measured(system: str, backend: str, collective: str, n: int, domain: int,
              allow_below: bool) -> tuple[int, dict[str, Any]] | None:
    """(measured count m, curve) for the smallest measured m ≥ n within `domain`, else (if `allow_below`)
    the largest m < n."""
    doc = _load_data()[1].get(system)
    if doc is None:
        return None
    found = {c["n_gpus"]: c for c in doc.get("curve", [])
             if c["backend"] == backend and c["collective"] == collective}
    above = [m for m in found if m >= n and m <= max(domain, n)]
    if above:
        return min(above), found[min(above)]
    below = [m for m in found if m < n and allow_below]
    return (max(below), found[max(below)]) if below else None


def _link_bw(gpu: GpuSpec, mode: str) -> float:
    return gpu.nvlink_bw_bytes_per_s if mode == "nvlink" else gpu.pcie_bw_bytes_per_s


def _from_system(gpu: GpuSpec, system: str, mode: str, backend: str, collective: str, n: int,
                 note: str, allow_below: bool = True) -> CollectiveCurve | None:
    """Curve for `gpu` at n from `system`'s measurement (steps 1–4 of the module docstring)."""
    domain = gpu.nvlink_domain_gpus if mode == "nvlink" else 1 << 20
    hit = _measured(system, backend, collective, n, domain, allow_below)
    if hit is None:
        return None
    m, c = hit
    if _link_bw(gpu, mode) <= 0:
        raise ScenarioError(f"{gpu.name}: {mode} bandwidth must be > 0")
    # Rescale by link bandwidth also for the GPU's own data, so a what-if GpuSpec (faster link) takes effect.
    scale = _link_bw(load_gpu(system), mode) / _link_bw(gpu, mode)
    src = c["source"] + note + ("" if m == n else f"; {m}-GPU curve used for {n} GPUs (DERIVED)")
    if scale != 1.0:
        src += f"; bandwidth term x{scale:.3g} for {gpu.name} (DERIVED)"
    times_s = [units.us_to_s(t) for t in c["latency_us"]]
    derived = bool(note) or m != n or scale != 1.0
    curve = _points_curve(collective, m, list(c["message_bytes"]), times_s, src, derived, scale)
    if m >= n:
        return curve
    floor = curve.latency_floor_s * (n - 1) / (m - 1)  # ring hop count grows with n
    return CollectiveCurve(collective, n, floor, curve.bus_bw_bytes_per_s,
                           src + f"; floor x(n-1)/(m-1) for {n} GPUs (DERIVED)", True)


def _native_mode(gpu: GpuSpec, n: int) -> str:
    if gpu.has_nvlink and n <= gpu.nvlink_domain_gpus:
        return "nvlink"
    return "pcie_p2p" if gpu.p2p else "pcie_no_p2p"


def _resolve_mode(gpu: GpuSpec, n: int, interconnect: str | None) -> str:
    if interconnect is not None and interconnect not in INTERCONNECTS:
        raise ScenarioError(f"unknown interconnect '{interconnect}'; known: {', '.join(INTERCONNECTS)}")
    if interconnect in (None, "as_measured"):
        mode = _native_mode(gpu, n)
        if gpu.has_nvlink and n > gpu.nvlink_domain_gpus:
            raise ScenarioError(f"{n} GPUs exceed {gpu.name}'s NVLink domain of {gpu.nvlink_domain_gpus}; "
                                "inter-node collectives are not modelled")
        return mode
    if interconnect == "pcie":
        return "pcie_p2p" if gpu.p2p else "pcie_no_p2p"
    if interconnect == "nvlink" and (not gpu.has_nvlink or n > gpu.nvlink_domain_gpus):
        raise ScenarioError(f"{gpu.name} has no NVLink/XGMI domain of {n} GPUs")
    return interconnect


def _own_measured_ok(gpu: GpuSpec, mode: str, as_measured: bool) -> bool:
    doc = _load_data()[1].get(gpu.name)
    return bool(doc and doc.get("interconnect") == mode and (as_measured or doc.get("use_by_default")))


def _measured_chain(gpu: GpuSpec, mode: str, backend: str, collective: str, n: int,
                    as_measured: bool) -> CollectiveCurve | None:
    rules = _load_data()[0]
    if _own_measured_ok(gpu, mode, as_measured):
        own = _from_system(gpu, gpu.name, mode, backend, collective, n, "", allow_below=False)
        if own is not None:
            return own
    proxy: dict[str, Any] = {}
    if mode == "nvlink":
        proxy = rules.get("proxy", {}).get("nvlink", {}).get(gpu.name, {})
    elif mode == "pcie_p2p":
        proxy = rules.get("proxy", {}).get("pcie_p2p", {})
    if proxy and _load_data()[1].get(proxy["system"], {}).get("interconnect") == mode:
        got = _from_system(gpu, proxy["system"], mode, backend, collective, n, f"; via {proxy['source']}",
                           allow_below=False)
        if got is not None:
            return got
        got = _from_system(gpu, proxy["system"], mode, backend, collective, n, f"; via {proxy['source']}")
        if got is not None:
            return got
    if _own_measured_ok(gpu, mode, as_measured):
        return _from_system(gpu, gpu.name, mode, backend, collective, n, "")
    return None


def _no_p2p_curve(gpu: GpuSpec, collective: str, n: int) -> CollectiveCurve:
    """PCIe through host memory: all_reduce busbw = fraction(n) · pcie_bw, floor 41 µs at 8 GPUs; other
    collectives and GPU counts scaled like the measured RTX PRO 6000 P2P curves (DERIVED)."""
    frac, fsrc = _rule("pcie_no_p2p", f"all_reduce_busbw_fraction_{8 if n >= 8 else 4}")
    floor8, lsrc = _rule("pcie_no_p2p", "latency_floor_8")
    ref = load_gpu(_load_data()[0]["proxy"]["pcie_p2p"]["system"])
    ar8 = _from_system(ref, ref.name, "pcie_p2p", "nccl", "all_reduce", 8, "")
    this = _from_system(ref, ref.name, "pcie_p2p", "nccl", collective, n, "")
    ar_n = _from_system(ref, ref.name, "pcie_p2p", "nccl", "all_reduce", n, "")
    if ar8 is None or this is None or ar_n is None:
        raise BadConfig(f"{_DATA}/{ref.name}.toml: measured PCIe curves missing")
    rel_bw = this.bus_bw_bytes_per_s / ar_n.bus_bw_bytes_per_s
    floor = this.latency_floor_s * floor8 / ar8.latency_floor_s
    src = (f"DERIVED (PCIe without P2P): busbw {frac:.3g} x pcie_bw [{fsrc}] x {rel_bw:.2f} ({collective} vs "
           f"all_reduce, RTX PRO 6000 SE measured); floor scaled to {units.s_to_us(floor8):g} us at 8 GPUs [{lsrc}]")
    return CollectiveCurve(collective, n, floor, frac * gpu.pcie_bw_bytes_per_s * rel_bw, src, True)


def _send_recv_curve(gpu: GpuSpec, mode: str, n: int, all_gather: CollectiveCurve) -> CollectiveCurve:
    floor, lsrc = _rule("send_recv", "latency_floor")
    if mode == "pcie_p2p":
        frac, fsrc = _rule("send_recv", "pcie_p2p_bw_fraction")
        return CollectiveCurve("send_recv", n, floor, frac * gpu.pcie_bw_bytes_per_s,
                               f"DERIVED: floor [{lsrc}]; busbw {frac:g} x pcie_bw [{fsrc}]", True)
    # NVLink or host-staged PCIe: one link direction carries the message, at the all-gather's bus bandwidth.
    return CollectiveCurve("send_recv", n, floor, all_gather.bus_bw_bytes_per_s,
                           f"DERIVED: floor [{lsrc}]; busbw of the all_gather curve ({all_gather.source})", True)


def _broadcast_curve(n: int, all_gather: CollectiveCurve) -> CollectiveCurve:
    # A pipelined ring broadcast moves each byte over every ring link once, as an all-gather does.
    return CollectiveCurve("broadcast", n, all_gather.latency_floor_s, all_gather.bus_bw_bytes_per_s,
                           f"DERIVED: floor and busbw of the all_gather curve ({all_gather.source})", True)


def _custom_ar(gpu: GpuSpec, n: int, mode: str) -> tuple[bool, str]:
    rules = _load_data()[0].get("custom_all_reduce", {})
    sizes = rules.get("world_sizes", [])
    pcie_max, psrc = _rule("custom_all_reduce", "pcie_max_gpus")
    if n not in sizes:
        return False, f"world size {n} not in {sizes} ({rules.get('world_sizes_source')})"
    if mode == "pcie_no_p2p":
        return False, "no GPU peer-to-peer access (VLLM-CAR: gpu_p2p_access_check must pass)"
    if mode != "nvlink" and n > pcie_max:
        return False, f"PCIe-only with {n} > {pcie_max:g} GPUs: {psrc}"
    return True, f"allowed: world size {n}, {mode} (VLLM-CAR)"


def load_collectives(gpu: str | GpuSpec, n_gpus: int, interconnect: str | None = None) -> CollectiveCurves:
    """Collective curves for `n_gpus` GPUs of one kind. `interconnect`: None = the GPU's own fabric (NVLink
    within its domain, else PCIe with or without P2P as the GPU allows); "nvlink", "pcie" (P2P if the GPU
    has it), "pcie_p2p", "pcie_no_p2p" force a fabric (what-ifs); "as_measured" also uses measured sets
    flagged unrepresentative (L40S). Raises ScenarioError for n_gpus < 1 or an impossible fabric."""
    spec = gpu if isinstance(gpu, GpuSpec) else load_gpu(gpu)
    if n_gpus < 1:
        raise ScenarioError(f"n_gpus must be >= 1, got {n_gpus}")
    mode = _resolve_mode(spec, n_gpus, interconnect)
    max_bytes, msrc = _rule("custom_all_reduce", "max_message")
    if n_gpus == 1:
        zero = {c: CollectiveCurve(c, 1, 0.0, math.inf, "one GPU: no communication", True) for c in COLLECTIVES}
        return CollectiveCurves(spec.name, 1, mode, zero, zero["all_reduce"], False, "one GPU", max_bytes,
                                {c: zero[c].source for c in COLLECTIVES})
    as_measured = interconnect == "as_measured"
    curves: dict[str, CollectiveCurve] = {}
    for coll in _MEASURED:
        got = None if mode == "pcie_no_p2p" and not as_measured else _measured_chain(
            spec, mode, "nccl", coll, n_gpus, as_measured)
        curves[coll] = got if got is not None else _no_p2p_curve(spec, coll, n_gpus)
    curves["send_recv"] = _send_recv_curve(spec, mode, n_gpus, curves["all_gather"])
    curves["broadcast"] = _broadcast_curve(n_gpus, curves["all_gather"])
    available, reason = _custom_ar(spec, n_gpus, mode)
    if available:
        vllm = _measured_chain(spec, mode, "vllm_graph", "all_reduce", n_gpus, as_measured)
    elif _own_measured_ok(spec, mode, as_measured):  # vLLM's measured fallback path on this very system
        vllm = _from_system(spec, spec.name, mode, "vllm_graph", "all_reduce", n_gpus, "", allow_below=False)
        vllm = vllm if vllm is not None and vllm.n_gpus == n_gpus else None
    else:
        vllm = None
    if vllm is None:
        vllm = curves["all_reduce"]
        reason += "; vLLM all-reduce modelled by the NCCL curve" + ("" if not available else " (no measurement)")
    sources = {c: curves[c].source for c in COLLECTIVES}
    sources["vllm_all_reduce"] = vllm.source
    sources["custom_allreduce_max_bytes"] = msrc
    alternatives: dict[str, CollectiveCurve] = {}
    for backend in _ALTERNATIVES if mode == "pcie_p2p" else ():
        alt = _measured_chain(spec, mode, backend, "all_reduce", n_gpus, as_measured)
        if alt is not None:
            alternatives[backend] = alt
            sources[backend] = alt.source
    return CollectiveCurves(spec.name, n_gpus, mode, curves, vllm, available, reason, max_bytes, sources,
                            alternatives)


def collective_time_s(curves: CollectiveCurves, collective: str, message_bytes: float,
                      n_gpus: int | None = None, backend: str = "nccl") -> float:
    """Time (s) of one collective of `message_bytes` (nccl-tests size convention) on `curves.n_gpus` GPUs.

    Two-parameter form (no measured points):  t = latency_floor_s + f(n) · bytes / bus_bw_bytes_per_s,
    f(n) = 2(n−1)/n for ring all_reduce; (n−1)/n for all_gather, reduce_scatter, all_to_all; 1 for
    broadcast and send_recv (`bus_factor`). Measured points: log-log linear interpolation of their
    monotone least-squares fit (`monotone_fit`); below the smallest measured size t = the first fitted
    point (the floor); above the largest, t = t_last + f(n) · (bytes − bytes_last) / bus_bw.
    One GPU or zero bytes: 0.
    `backend` (all_reduce only, except "nccl"): "vllm" = vLLM's path in a CUDA graph (custom AR where
    allowed; the measured curve includes vLLM's NCCL fallback above 8 MiB); "pcie_oneshot", "nccl_tuned"
    (PCIe P2P what-ifs, `curves.alternatives`) = min(that curve, the NCCL curve).
    Assumptions: isolated collective (no rank skew, no overlap), bf16/fp16 payloads as measured.
    """
    if n_gpus is not None and n_gpus != curves.n_gpus:
        raise ScenarioError(f"curves are for {curves.n_gpus} GPUs, asked for {n_gpus}")
    if message_bytes < 0 or math.isnan(message_bytes):
        raise ScenarioError(f"message_bytes must be >= 0, got {message_bytes}")
    if collective not in curves.curves:
        raise ScenarioError(f"unknown collective '{collective}'; known: {', '.join(COLLECTIVES)}")
    known = ("nccl", "vllm", *curves.alternatives)
    if backend not in known or (backend != "nccl" and collective != "all_reduce"):
        raise ScenarioError(f"backend '{backend}' is not available for {collective} on {curves.gpu} x"
                            f"{curves.n_gpus} over {curves.interconnect} (available: {', '.join(known)})")
    if curves.n_gpus <= 1 or message_bytes == 0:
        return 0.0
    nccl = curve_time_s(curves.curves[collective], message_bytes)
    if backend == "nccl":
        return nccl
    if backend == "vllm":
        return curve_time_s(curves.vllm_all_reduce, message_bytes)
    return min(nccl, curve_time_s(curves.alternatives[backend], message_bytes))


def curve_time_s(curve: CollectiveCurve, message_bytes: Any) -> Any:
    """Time (s) of one curve at `message_bytes` (a number, or a numpy array: elementwise); the formula is in
    `collective_time_s`."""
    mb = np.asarray(message_bytes, dtype=float)
    factor = bus_factor(curve.collective, curve.n_gpus)
    if not curve.message_bytes:
        out = curve.latency_floor_s + factor * mb / curve.bus_bw_bytes_per_s
    else:
        xs, ts = curve.message_bytes, curve.time_s
        # The fitted points are monotone, so no time is below the floor (exp∘log may round an ulp under it).
        inner = np.maximum(np.exp(np.interp(np.log(np.maximum(mb, xs[0])), np.log(xs), np.log(ts))), ts[0])
        above = ts[-1] + factor * (mb - xs[-1]) / curve.bus_bw_bytes_per_s
        out = np.where(mb >= xs[-1], above, inner)
    return float(out) if out.ndim == 0 else out
