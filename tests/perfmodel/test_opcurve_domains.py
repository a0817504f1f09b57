"""Issue 27: every measured per-op curve used only inside its domain and bounds.

Part 1 — the domain of each bundled table against the raw JSON (read here with json, not through the loader): the
measured range of every axis, the dtypes, the version window (the measured release and newer ones of its
major.minor series up to the next measured one), and a file missing a domain field refused naming file and field.
Part 2 — a coarse sweep, every bundled curve system × a dense GQA (Llama-3.1-8B), a GQA MoE (Qwen3-30B-A3B) and two
MLA models (DeepSeek-V3, Kimi-K2.5) × each engine × context 0–128k × batch 1–512: every decode-attention and
dense-GEMM curve time lies between its shape's physical floor and 3× its priced roofline (both written out here
from the model config, the datasheet and efficiency.toml [roofline]); an fp8 KV cache never prices a decode step or
its attention above a bf16 one; every routed-expert curve too (uniform routing, its touched experts written here);
and no lookup answers for another engine or a version outside its window.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servescope.errors import BadConfig
from servescope.perfmodel import Scenario, opcurve
from servescope.perfmodel.attention_curve import (
    decode_attention_curve,
    decode_verdict,
    describe_decode,
)
from servescope.perfmodel.combine import combine_step
from servescope.perfmodel.measured_ops import dense_gemm_curve, moe_layer_s
from servescope.perfmodel.routing import Routing
from servescope.perfmodel.step import model_for, step_parts
from servescope.specs import opcurves as oc_specs
from servescope.specs import tables
from servescope.specs.opcurves import load_opcurves, opcurve_systems

ROOT = Path(__file__).parents[2]
DATA = ROOT / "src/servescope/specs/data/opcurves"
EFF = tomllib.loads((ROOT / "src/servescope/specs/data/efficiency.toml").read_text())["roofline"]
MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "kimi-k2.5")
CONTEXTS = np.array([0.0, 1024.0, 8192.0, 32768.0, 131072.0])
BATCHES = np.array([1.0, 8.0, 64.0, 512.0])
ATTN_KERNELS = 2.5  # kernel_counts.toml [trace.vllm_graph_decode] "attention 2.5"


def _raw(system: str) -> dict[str, Any]:
    return json.loads((DATA / f"{system}.json").read_text())  # type: ignore[no-any-return]


def _measured_axes(t: dict[str, Any]) -> dict[str, list[Any]]:
    """Grid values of each axis with at least one non-null cell, from the nested rows."""
    axes = list(t["axes"])
    hit: list[set[int]] = [set() for _ in axes]

    def walk(cells: Any, depth: int, path: tuple[int, ...]) -> None:
        for i, c in enumerate(cells):
            if depth + 1 < len(axes):
                walk(c, depth + 1, (*path, i))
            elif c is not None:
                for d, j in enumerate((*path, i)):
                    hit[d].add(j)

    for row in t["rows"]:
        walk(row[-1], 0, ())
    return {a: [t["axes"][a][j] for j in sorted(hit[d])] for d, a in enumerate(axes)}


def _ver(v: str) -> tuple[int, ...]:
    """A release number as integers, rcN below its release: written here, not the loader's."""
    head, _, rc = v.partition("rc")
    nums = [int(x) for x in head.replace(".post", ".").split(".") if x.isdigit()][:4]
    return (*nums, *[0] * (4 - len(nums)), -1 if rc else 0, int(rc) if rc else 0)


@pytest.mark.parametrize("system", sorted(p.stem for p in DATA.glob("*.json")))
def test_each_table_domain_is_what_its_raw_json_measured(system: str) -> None:
    raw, loaded = _raw(system), load_opcurves(system)
    assert len(raw["tables"]) == len(loaded)
    for t, tab in zip(raw["tables"], loaded, strict=True):
        d = tab.domain
        assert (d.system, d.op, d.engine, d.version) == (system, t["op"], t["engine"], t["version"])
        assert d.kernels == tuple(t["kernel_sources"])
        for axis, vals in _measured_axes(t).items():
            if isinstance(vals[0], str):
                assert dict(d.categories)[axis] == tuple(vals)
            else:
                assert d.axis(axis) == (min(vals), max(vals))
        key = [*t["fixed"], *t["key"][:-1]]
        for col, values in d.dtypes:
            i = key.index(col) if col in key else None
            want = {t["fixed"][col]} if col in t["fixed"] else (
                {str(r[i - len(t["fixed"])]) for r in t["rows"]} if i is not None else {"bfloat16"})
            assert set(values) == want


def test_version_windows_from_the_raw_versions() -> None:
    for system in opcurve_systems():
        raw = _raw(system)
        by: dict[tuple[str, str], list[str]] = {}
        for t in raw["tables"]:
            by.setdefault((t["op"], t["engine"]), []).append(t["version"])
        for tab in load_opcurves(system):
            vs = sorted(by[(tab.op, tab.engine)], key=_ver)
            v = _ver(tab.version)
            nxt = [x for x in vs if _ver(x) > v]
            assert tab.domain.answers(tab.version)
            assert not tab.domain.answers(f"{v[0]}.{v[1] - 1}.0" if v[1] else "0.0.1")  # an older series
            assert not tab.domain.answers(f"{v[0]}.{v[1] + 1}.0")  # the next series
            if nxt:
                assert not tab.domain.answers(nxt[0])
            elif v[4] == 0:  # a release (not an rc): its next patch is answered
                assert tab.domain.answers(f"{v[0]}.{v[1]}.{v[2] + 1}")
            if v[2] > 0 and v[4] == 0:
                assert not tab.domain.answers(f"{v[0]}.{v[1]}.{v[2] - 1}")  # an older patch


@pytest.mark.parametrize("drop", ["kernel_sources", "system", "gemm_dtype"])
def test_a_file_missing_a_domain_field_is_refused_naming_file_and_field(drop: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"op": "gemm", "engine": "vllm", "version": "0.24.0", "framework": "VLLM", "source": "x.parquet",
             "kernel_sources": ["k"], "fixed": {}, "key": ["gemm_dtype", "n", "kernel"], "axes": {"m": [1, 2]},
             "rows": [["bfloat16", 512, 0, [1.0, 2.0]]]}
    doc: dict[str, Any] = {"time_unit": "us", "system": "fake", "tables": [table]}
    if drop == "system":
        del doc["system"]
    elif drop == "kernel_sources":
        del table["kernel_sources"]
    else:
        table["key"], table["rows"] = ["n", "kernel"], [[512, 0, [1.0, 2.0]]]
    monkeypatch.setattr(tables, "opcurve_systems", lambda: ["fake"])
    monkeypatch.setattr(tables, "opcurves", lambda system: doc)
    oc_specs.load_opcurves.cache_clear()
    try:
        with pytest.raises(BadConfig, match=rf"opcurves/fake\.json.*{drop}"):
            load_opcurves("fake")
    finally:
        oc_specs.load_opcurves.cache_clear()


# --- the sweep ----------------------------------------------------------------------------------------------------

def _rates(sc: Scenario) -> tuple[float, float, float, float]:
    g = sc.gpu
    bw = float(g.hbm_bw_bytes_per_s)
    return bw, bw * float(g.hbm_bw_efficiency or 0.8), float(g.flops_per_s["bf16"]), float(sc.efficiency.kernel_overhead_s)


def _attention_bounds(sc: Scenario, b: np.ndarray, kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(floor, 3 × priced roofline) of ONE layer's decode attention, from the config and the datasheet."""
    m, bw, bw_ach, peak, k_s = sc.model, *_rates(sc)
    h, kvb = m.n_heads / sc.tp, sc.quant.kv.bytes_per_param
    if m.attention_kind == "mla":
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        nbytes, fl = b * (kv * lat * kvb + 4 * h * lat), 2 * b * h * kv * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        kvh = max(m.n_kv_heads // sc.tp, 1)
        nbytes, fl = b * (kv * 2 * kvh * m.head_dim * kvb + 4 * h * m.head_dim), 4 * b * h * m.head_dim * kv
    fast = float(sc.gpu.flops_per_s.get("fp8") or peak) if kvb < 2 else peak
    floor = np.maximum(nbytes / bw, fl / fast)
    roof = np.maximum(nbytes / (bw_ach * EFF["attn_bw_eff"]), fl / (peak * EFF["attn_compute_eff"])) + ATTN_KERNELS * k_s
    return floor, 3.0 * roof


def _deployments() -> list[tuple[str, str, str]]:
    return [(s, m, e) for s in opcurve_systems() for m in MODELS for e in ("vllm", "sglang", "trtllm")]


def _build(system: str, model: str, engine: str, kv: str) -> Scenario:
    tp = 1 if model == "llama-3.1-8b" else 8
    return Scenario.build(model, system, tp=tp, backend=engine, kv_quant=kv, check_memory=False)


def test_every_curve_between_its_floor_and_three_rooflines_and_fp8_kv_never_slower() -> None:
    b, kv = (x.ravel() for x in np.meshgrid(BATCHES, CONTEXTS))
    priced = 0
    for system, model, engine in _deployments():
        bf16, fp8 = (_build(system, model, engine, k) for k in ("bf16", "fp8"))
        for sc in (bf16, fp8):
            t = decode_attention_curve(sc, b, kv)
            engine_used, _ = decode_verdict(sc)
            if t is None:
                continue
            priced += 1
            assert engine_used == engine  # no other engine's table stands in without --op-curves transfer
            layers = sc.model.n_attn("full") + sc.model.n_attn("sliding")
            floor, cap = _attention_bounds(sc, b, np.maximum(kv, 1.0))
            assert np.all(t >= layers * floor * (1 - 1e-9)), (system, model, engine, sc.quant.kv.name)
            assert np.all(t <= layers * cap * (1 + 1e-9)), (system, model, engine, sc.quant.kv.name)
        _gemms_bounded(bf16)
        a16, a8 = (combine_step(step_parts(sc, b, kv, 1), sc.efficiency) for sc in (bf16, fp8))
        for cls in ("attention", "step"):
            assert np.all(a8[cls] <= a16[cls] * (1 + 1e-9)), (system, model, engine, cls)
    assert priced > 40  # the sweep prices real curves, not only the datasheet


def _gemms_bounded(sc: Scenario) -> None:
    """Σ over the GEMMs a curve prices of count × curve(M) lies within Σ count × [floor, 3 × priced roofline]."""
    bw, bw_ach, _, k_s = _rates(sc)
    m = np.array([1.0, 8.0, 64.0, 512.0, 8192.0])
    dense = dense_gemm_curve(sc, model_for(sc).gemms, m, m, float(sc.gpu.hbm_bw_bytes_per_s))
    lo, hi = np.zeros_like(m), np.zeros_like(m)
    peaks = {"bf16": "bf16", "fp8": "fp8", "fp4": "fp4", "int8": "int8"}
    for g in dense.covered:
        fl = sc.gpu.flops_per_s
        key = peaks.get(g.weights.gemm_dtype, "bf16")
        peak = float(fl.get(key) or fl.get("fp8") or fl["bf16"])
        nbytes = g.n * g.k * g.weights.bytes_per_param + m * (g.k + g.n) * 2.0
        lo += g.count * np.maximum(nbytes / bw, 2 * m * g.n * g.k / peak)
        hi += g.count * 3.0 * (np.maximum(nbytes / (bw_ach * EFF["gemm_bw_eff"]),
                                          2 * m * g.n * g.k / (peak * EFF["compute_eff"])) + k_s)
    assert np.all(dense.time_s >= lo * (1 - 1e-9)) and np.all(dense.time_s <= hi * (1 + 1e-9)), sc


def test_every_expert_curve_between_its_floor_and_three_rooflines() -> None:
    """Routed experts (uniform routing, so the touched experts are E·(1 − (1 − k/E)^T), written here): each
    measured layer time within [floor, 3 × roofline] at 1–512 tokens; bytes = touched / ep × 3·H·I / moe_tp × the
    experts' bytes per parameter, FLOPs = T · 2 · k · 3·H·I / (tp · dp)."""
    tokens = np.array([1.0, 3.0, 8.0, 40.0, 64.0, 200.0, 512.0])
    priced = 0
    for system, model, engine in _deployments():
        if model == "llama-3.1-8b":
            continue
        sc = _build(system, model, engine, "bf16").with_(routing=Routing("uniform"))
        t = moe_layer_s(sc, tokens)
        if t is None:
            continue
        priced += 1
        m, q = sc.model, sc.quant.experts
        e, k, per_expert = m.n_routed_experts, m.top_k, 3.0 * m.hidden_size * m.moe_intermediate_size
        nbytes = e * (1 - (1 - k / e) ** tokens) / sc.ep * per_expert / sc.moe_tp * q.bytes_per_param
        fl = sc.gpu.flops_per_s
        peak = float(fl.get({"fp8": "fp8", "fp4": "fp4", "int8": "int8"}.get(q.gemm_dtype, "bf16")) or fl["bf16"])
        comp = tokens * 2 * k * per_expert / (sc.tp * sc.dp) / peak
        bw = float(sc.gpu.hbm_bw_bytes_per_s)
        floor = np.maximum(nbytes / bw, comp)
        roof = np.maximum(nbytes / (bw * float(sc.gpu.hbm_bw_efficiency or 0.8)), comp)
        assert np.all(t >= floor * (1 - 1e-9)) and np.all(t <= 3 * roof * (1 + 1e-9)), (system, model, engine)
    assert priced > 10


def test_no_lookup_answers_outside_its_engine_or_version_window() -> None:
    for system in opcurve_systems():
        by: dict[tuple[str, str], list[str]] = {}
        for t in _raw(system)["tables"]:
            by.setdefault((t["op"], t["engine"]), []).append(t["version"])
        for (op, engine), versions in by.items():
            oldest = min(versions, key=_ver)
            v = _ver(oldest)
            older = f"{v[0]}.{v[1] - 1}.0" if v[1] else None
            for want in filter(None, (older, f"{v[0]}.{v[1] + 1}.0" if not any(
                    _ver(x)[:2] == (v[0], v[1] + 1) for x in versions) else None)):
                table, why = opcurve._table(system, op, engine, want)
                assert table is None and "outside" in why, (system, op, engine, want)
                moved, note = opcurve._table(system, op, engine, want, transfer=True)
                assert moved is not None and "transferred" in note
            for want in versions:
                table, _ = opcurve._table(system, op, engine, want)
                assert table is not None and table.engine == engine and table.version == want


def test_the_issue_cases_are_priced_inside_their_domains() -> None:
    """vLLM has no MLA kernel table: Kimi-K2.5 on the RTX PRO 6000 is the datasheet's at 128k (not TRT-LLM's fp8 MLA
    curve), and fp8 KV halves that term; SGLang 0.5.9 is outside the 0.5.14 tables' window (DeepSeek-R1 on H200)."""
    kimi = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, isl=131072, osl=512,
                          check_memory=False).with_(decode_only=True)
    assert decode_attention_curve(kimi, np.array([1.0]), np.array([131072.0])) is None
    assert "no generation_mla curves for vllm" in describe_decode(kimi)
    moved = kimi.with_(efficiency=kimi.efficiency.scaled(op_curves=2.0))  # --op-curves transfer: said where used
    assert decode_verdict(moved)[0] is None or "transferred from" in describe_decode(moved)
    r1 = Scenario.build("deepseek-r1", "h200_sxm", tp=8, backend="sglang", engine_version="0.5.9", kv_quant="fp8",
                        isl=1024, osl=8192, check_memory=False)
    assert decode_attention_curve(r1, np.array([64.0]), np.array([5120.0])) is None
    assert "sglang 0.5.9 is outside the measured generation_mla tables' versions (0.5.14 ≤ v" in describe_decode(r1)
