"""A ledger row's `change` is priced as that one quantization option (the v49077 pairs change only the KV cache),
and the FP8 KV decode on a GPU without FP8 conversion follows from the specs (perfmodel.kv_dequant)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from servescope.errors import BadConfig, PlanError
from servescope.perfmodel.kv_dequant import kv_dequant
from servescope.perfmodel.ops import achieved_bw_bytes_per_s, build_ops, peak_flops
from servescope.perfmodel.scenario import Scenario
from servescope.planner.pair_check import check_pairs
from servescope.planner.plan import plan
from servescope.planner.tracks import TRACK_KINDS
from servescope.planner.tracks_compute import parse_change
from servescope.specs import quant as q
from servescope.specs import tables
from servescope.specs.hardware import load_gpu
from servescope.validation.pairs import deployment, read_ledger

LEDGER = Path(__file__).resolve().parents[1] / "data" / "planner" / "pairs_ledger.csv"


def _rows(pred) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    with LEDGER.open(newline="", encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh) if pred(r)]


def _write(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    out = tmp_path / "ledger.csv"
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return out


def test_v49077_rows_say_kv_only() -> None:
    rows = _rows(lambda r: r["id"].startswith("v49077_"))
    assert len(rows) == 8
    assert {r["change"] for r in rows} == {"kv=fp8"}


def test_parse_change() -> None:
    assert parse_change("kv=fp8") == (("kv", "fp8"),)
    assert parse_change("weights=fp8 + KV=FP8") == (("kv", "fp8"), ("weights", "fp8"))  # canonical order
    for bad, said in (("kv=fp4", "kv takes fp8"), ("cache=fp8", "unknown part"), ("kv=fp8+kv=fp8", "twice"),
                      ("", "unknown part")):
        with pytest.raises(PlanError, match=said):
            parse_change(bad)


def test_kv_only_option_is_what_gets_priced(tmp_path: Path) -> None:
    """Gemma-31B on H100: the KV-only option prices ~1.0x at batch 1 (KV is a sliver of the step); the best option
    (KV + the 16-bit attention weights to FP8) prices well above it — the pair is the KV change alone."""
    rows = _rows(lambda r: r["id"] == "v49077_g31_h100")
    checks = check_pairs(_write(tmp_path, rows))
    (c,) = checks
    assert c.prediction.gain is not None
    assert "kv=fp8: KV cache to FP8" in c.prediction.how and "weights" not in c.prediction.how
    sc = deployment(read_ledger(_write(tmp_path, rows), TRACK_KINDS)[0], LEDGER)
    others = tuple(k for k in TRACK_KINDS if k != "quantization")
    best = plan(sc, "tpot", 1, forbid=others).track("quantization")
    only = plan(sc, "tpot", 1, forbid=others, option="kv=fp8").track("quantization")
    assert best.details["option"] == "KV cache to FP8 + 16-bit weights to FP8"  # `plan` unchanged: the best
    assert only.details["option"] == "KV cache to FP8"
    assert only.gain == pytest.approx(c.prediction.gain)
    assert 1.0 <= only.gain < 1.05 < best.gain


def test_change_bad_input_one_line(tmp_path: Path) -> None:
    (row,) = _rows(lambda r: r["id"] == "v49077_g26_h100")
    with pytest.raises(BadConfig) as e:
        check_pairs(_write(tmp_path, [{**row, "change": "kv=fp4"}]))
    msg = str(e.value)
    assert "line 2 (v49077_g26_h100): field change" in msg and "\n" not in msg
    graphs = _rows(lambda r: r["track"] == "cuda_graphs")[0]
    with pytest.raises(BadConfig, match="field change: track cuda_graphs takes no change"):
        check_pairs(_write(tmp_path, [{**graphs, "change": "kv=fp8"}]))


def test_a100_dequant_from_specs() -> None:
    """sm_80 has no E4M3 conversion: instructions per element over half the non-tensor FP32 peak, both from
    specs/data/kv_dequant.toml; sm_90 converts in hardware (0); a 16-bit KV has nothing to decode (0)."""
    doc = tables.read_toml("kv_dequant.toml")
    a100, h100 = load_gpu("a100_sxm"), load_gpu("h100_sxm")
    ipe = doc["software_decode"]["instructions_per_element"]
    lanes = doc["simt_fp32_tflops"]["a100_sxm"]["value"] * 1e12 / 2.0
    assert lanes == pytest.approx(a100.sm_count * 64 * 1.41e9, rel=0.01)  # 108 SMs x 64 lanes x 1.41 GHz
    s = kv_dequant(a100, q.SCHEMES["fp8"]).s_per_element
    assert s == pytest.approx(ipe / lanes) and s > 0
    assert kv_dequant(h100, q.SCHEMES["fp8"]).s_per_element == 0.0
    assert kv_dequant(a100, q.SCHEMES["bf16"]).s_per_element == 0.0
    # the decode's ALU time per element is below the FP8 byte's read time at the achieved bandwidth: the roofline
    # hides it and FP8 KV still halves the KV-bound time on A100 (the physics, not the measured 0.77x)
    assert s < 1.0 / achieved_bw_bytes_per_s(a100)


def test_a100_decode_joins_attention_compute() -> None:
    """ops adds elements/token x s_per_element x peak to each context term's decode FLOPs on A100 (its sign: more
    work), nothing on H100."""
    for gpu, extra in (("a100_sxm", True), ("h100_sxm", False)):
        sc16 = Scenario.build("llama-3.1-8b", gpu, kv_quant="bf16")
        sc8 = replace(sc16, quant=replace(sc16.quant, kv=q.SCHEMES["fp8"]))
        t16, t8 = build_ops(sc16).ctx_terms, build_ops(sc8).ctx_terms
        s = kv_dequant(sc8.gpu, sc8.quant.kv).s_per_element or 0.0
        for a, b in zip(t16, t8, strict=True):
            assert b.bytes_per_token == pytest.approx(a.bytes_per_token / 2)
            want = a.flops_decode + (b.bytes_per_token * s * peak_flops(sc8.gpu, "bf16"))
            assert b.flops_decode == pytest.approx(want)
            assert (b.flops_decode > a.flops_decode) is extra


def test_no_alu_rate_leaves_the_change_unpriced() -> None:
    """RTX 3090 (sm_86) has no FP8 conversion and no ALU rate in the specs: the KV change is not applicable, with
    the reason, rather than priced as bytes alone."""
    sc = Scenario.build("llama-3.1-8b", "rtx_3090", kv_quant="bf16")
    assert kv_dequant(sc.gpu, q.SCHEMES["fp8"]).s_per_element is None
    others = tuple(k for k in TRACK_KINDS if k != "quantization")
    t = plan(sc, "tpot", 1, forbid=others, option="kv=fp8").track("quantization")
    assert not t.applicable and "no ALU rate for rtx_3090" in (t.why_not or "")


def test_a100_row_priced_kv_only_while_plan_keeps_its_options(tmp_path: Path) -> None:
    """On A100 (no FP8 tensor cores) `plan` offers no KV option, as before; the ledger row's change prices the FP8
    KV cache anyway (storage, decoded in software), and the track's note says so."""
    rows = _rows(lambda r: r["id"] == "v49077_g31_a100")
    path = _write(tmp_path, rows)
    sc = deployment(read_ledger(path, TRACK_KINDS)[0], path)
    others = tuple(k for k in TRACK_KINDS if k != "quantization")
    best = plan(sc, "tpot", 1, forbid=others).track("quantization")
    assert not best.applicable and "nothing left to lower" in (best.why_not or "")
    only = plan(sc, "tpot", 1, forbid=others, option="kv=fp8").track("quantization")
    assert only.applicable and only.gain is not None
    assert "software decode" in only.note
    (c,) = check_pairs(path)
    assert c.prediction.gain == pytest.approx(only.gain)
