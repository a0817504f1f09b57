"""`validate` with decode-only rows (validation.decode_only): each row priced on the model's decode-only path at its
context, reported as its own slice, the leave-one-source-out fold, and bad rows refused with file, row and field."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from servescope.cli import main
from servescope.perfmodel import Scenario, predict
from servescope.perfmodel.efficiency import unfitted_start
from servescope.validation.crossval import SOURCE_GROUPING, cross_validate, with_sources
from servescope.validation.decode_only import read_decode_csv, validate_decode_csv
from servescope.validation.fit import fit, fit_data, predict_data
from servescope.validation.validate import parse_row

DATA = Path(__file__).parents[1] / "data" / "validation"
ROWS = DATA / "decode_only_rows.csv"
DEV = DATA / "measured_serving_dev.csv"
LLAMA, H100 = "meta-llama/Llama-3.1-8B", "h100_sxm"


def _raw() -> list[dict[str, str]]:
    with ROWS.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _public_decode_tpot_ms(context: int, osl: int, batch: int, kv: str | None = None) -> float:
    """The decode-only TPOT through the public API: Scenario at isl = context, decode_only, predict at the batch."""
    sc = Scenario.build(model=LLAMA, gpu=H100, isl=context, osl=osl, backend="vllm", engine_version="0.11.0",
                        quant="native", kv_quant=kv).with_(decode_only=True)
    return predict(sc, [batch])[0].tpot_s * 1e3


def test_each_row_is_priced_at_its_context_on_the_public_decode_only_path() -> None:
    v = validate_decode_csv(ROWS)
    assert v is not None and not v.skipped
    got = {r.id: r for r in v.rows}
    for raw in _raw():
        r = got[raw["id"]]
        if raw["context"]:
            context, osl = int(raw["context"]), 1  # a fixed-context row: no output length given
        else:  # bench-latency style: steps at isl+1 … isl+osl−1, priced at their mean isl + osl/2
            context, osl = int(raw["isl"]) + int(raw["osl"]) // 2, int(raw["osl"])
        assert r.context == context
        batch = int(raw["batch_size"])
        expect = _public_decode_tpot_ms(context, osl, batch, raw["kv_quant_mode"] or "bf16")  # bf16 weights: bf16 KV
        assert r.pred_tpot_ms == pytest.approx(expect, rel=1e-9)
        measured = float(raw["silicon_tpot_ms"]) if raw["silicon_tpot_ms"] else batch * 1e3 / float(raw["output_tok_s"])
        assert r.tpot_ms == pytest.approx(measured)
        assert r.source == raw["source"] and r.concurrency == batch and r.measure == "step"
    # the path matters: a steady-serving prediction of the same row (prompts in the steps, context isl + osl/2)
    # is not the decode-only one
    serving = Scenario.build(model=LLAMA, gpu=H100, isl=1024, osl=128, engine_version="0.11.0")
    assert predict(serving, [8])[0].tpot_s * 1e3 > got["llama8b_h100_in1024_out128_b8"].pred_tpot_ms * 1.001
    # longer context, same batch: slower (the KV term)
    assert _public_decode_tpot_ms(32768, 1, 8) > _public_decode_tpot_ms(2048, 1, 8)


def test_a_row_below_the_floor_of_its_decode_step_is_skipped_with_the_numbers(tmp_path: Path) -> None:
    """Llama-3.1-8B bf16 on one H100: 16 GB of weights plus 8 × 32,768 tokens × 128 KiB of KV read per step is
    over 3.35 TB/s × 12.9 ms; a measured 12.9 ms step is not a plain decode step."""
    text = ROWS.read_text(encoding="utf-8").replace(",32768,8,1,1,1,1,,,,,17.2,", ",32768,8,1,1,1,1,,,,,12.9,")
    (tmp_path / "rows.csv").write_text(text, encoding="utf-8")
    v = validate_decode_csv(tmp_path / "rows.csv")
    assert v is not None
    assert [i for i, _ in v.skipped] == ["llama8b_h100_ctx32k_b8"] and "below_floor" in v.skipped[0][1]


def _mixed_csv(tmp_path: Path, extra: dict[str, str] | None = None, n_agg: int = 3) -> tuple[Path, list[str]]:
    """A CSV of a few aggregated dev rows (Llama-3.1-8B-Instruct, H100, TRT-LLM) and the sample decode-only rows."""
    with DEV.open(newline="", encoding="utf-8") as f:
        dev = [r for r in csv.DictReader(f) if r["model_path"] == LLAMA + "-Instruct" and r["system"] == H100
               and r["mode"] == "agg"][:n_agg]
    decode = _raw()
    if extra:
        decode.append({**decode[0], **extra})
    fields = list(dict.fromkeys([*dev[0].keys(), *decode[0].keys()]))
    path = tmp_path / "mixed.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(dev + decode)
    return path, [r["id"] for r in dev]


def test_the_slice_is_separate_in_the_report(tmp_path: Path) -> None:
    path, agg_ids = _mixed_csv(tmp_path)
    res = CliRunner().invoke(main, ["validate", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["agg_rows"] == len(agg_ids) and {r["id"] for r in doc["rows"]} <= set(agg_ids)
    d = doc["decode_only"]
    decode_ids = {r["id"] for r in _raw()}
    assert d["n_rows"] == len(decode_ids) and {r["id"] for r in d["rows"]} == decode_ids
    assert not decode_ids & {r["id"] for r in doc["rows"]} and not decode_ids & {s["id"] for s in doc["skipped"]}
    errs = [abs(r["pred_tpot_ms"] - r["tpot_ms"]) / r["tpot_ms"] for r in d["rows"]]
    assert d["tpot_mape"] == pytest.approx(np.mean(errs))
    assert set(d["by_source"]) == {"sweep_a", "latency_b"}
    assert sum(g["rows"] for g in d["by_source"].values()) == d["n_rows"]
    assert all("ttft_ms" not in r for r in d["rows"])
    text = CliRunner().invoke(main, ["validate", str(path)])
    assert text.exit_code == 0 and "decode-only rows" in text.stdout and "aggregated rows" in text.stdout
    table = list(csv.DictReader(CliRunner().invoke(main, ["validate", str(path), "--format", "csv"]).stdout.splitlines()))
    assert {r["id"] for r in table if r["slice"] == "decode_only"} == decode_ids
    assert {r["id"] for r in table if not r["slice"]} == {r["id"] for r in doc["rows"]}


def test_a_file_of_decode_only_rows_alone(tmp_path: Path) -> None:
    """No TTFT or isl/osl columns needed when every row is decode-only; --cv says there is nothing to refit."""
    cols = ("id", "backend", "model_path", "system", "mode", "context", "batch_size", "tp_size", "silicon_tpot_ms")
    path = tmp_path / "only.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(r for r in _raw() if r["context"] and r["silicon_tpot_ms"])
    res = CliRunner().invoke(main, ["validate", str(path), "--json", "--cv"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["agg_rows"] == 0 and doc["decode_only"]["n_rows"] == 3 and "cross_validation" not in doc
    assert "no modelled serving rows" in res.stderr


@pytest.mark.parametrize(("change", "field"), [
    ({"id": "bad_ctx", "context": "", "isl": "", "osl": ""}, "context"),
    ({"id": "bad_ttft", "silicon_ttft_ms": "210.5"}, "silicon_ttft_ms"),
    ({"id": "bad_tpot", "silicon_tpot_ms": "", "output_tok_s": ""}, "silicon_tpot_ms"),
    ({"id": "bad_batch", "batch_size": ""}, "batch_size"),
    ({"id": "bad_number", "context": "4k"}, "context"),
    ({"id": "bad_model", "model_path": ""}, "model_path"),
    ({"id": "bad_tp", "tp_size": "two"}, "tp_size"),
])
def test_a_bad_decode_only_row_is_refused_in_one_line(tmp_path: Path, change: dict[str, str], field: str) -> None:
    path, _ = _mixed_csv(tmp_path, change, n_agg=1)
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 1, res.output
    assert res.stdout == "" and res.stderr.count("\n") == 1 and "Traceback" not in res.output
    line = res.stderr
    assert str(path) in line and f"row {change['id']}" in line and f"field {field}" in line
    n_line = 1 + 1 + len(_raw()) + 1  # header, one aggregated row, the sample rows, then the bad row
    assert f"{path}:{n_line} " in line


def test_leave_one_source_out_holds_out_each_source() -> None:
    """Sources given to dev rows (Llama-3.1-70B, Qwen3-32B, gpt-oss-120b on H100, vLLM) by their ISL: each source's
    rows are predicted by a refit that never saw them, equal to an independent refit without that source."""
    models = ("meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B", "openai/gpt-oss-120b")
    with DEV.open(newline="", encoding="utf-8") as f:
        picked = [{**r, "source": f"campaign_isl{r['isl']}"} for r in csv.DictReader(f)
                  if r["model_path"] in models and r["system"] == H100 and r["backend"] == "vllm" and r["mode"] == "agg"]
    cache: dict = {}
    rows = [parse_row(r, cache) for r in picked]
    data = with_sources(fit_data(rows), rows)
    by_id = {r.id: r.source for r in rows}
    assert [by_id[i] for i in data.ids] == list(data.labels["source"])  # aligned with fit_data's row order
    sources = sorted(set(data.labels["source"]))
    assert len(sources) >= 2
    start = unfitted_start()
    cv = cross_validate(data, start, groupings=SOURCE_GROUPING, workers=1, iterations=3, fold_start=start)
    s = cv.summaries["leave_one_source_out"]
    assert s.folds == len(sources) and s.rows == len(data.tpot_s)
    pred = cv.pred_tpot_s["leave_one_source_out"]
    assert np.isfinite(pred).all()  # every row was held out once
    for src in sources:
        held = data.labels["source"] == src
        ref = fit(data.subset(~held), start, iterations=3)
        tp, _ = predict_data(data.subset(held), ref.efficiency)
        assert np.allclose(pred[held], tp)


def test_read_decode_csv_keeps_file_order() -> None:
    assert [r.id for r in read_decode_csv(ROWS)] == [r["id"] for r in _raw()]


def test_cli_cv_adds_the_source_fold_only_with_a_source_column(tmp_path: Path) -> None:
    with DEV.open(newline="", encoding="utf-8") as f:
        dev = [r for r in csv.DictReader(f) if r["system"] == H100 and r["mode"] == "agg" and r["backend"] == "vllm"]
    dev = dev[:24]
    for with_source in (False, True):
        rows = [{**r, "source": f"lab{i % 3}"} for i, r in enumerate(dev)] if with_source else dev
        path = tmp_path / f"src{with_source}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        res = CliRunner().invoke(main, ["validate", str(path), "--cv", "--json"])
        assert res.exit_code == 0, res.output
        cv = json.loads(res.stdout)["cross_validation"]
        assert ("leave_one_source_out" in cv) is with_source
        if with_source:
            n = json.loads(res.stdout)["n_rows"]
            assert cv["leave_one_source_out"]["folds"] == 3 and cv["leave_one_source_out"]["rows"] == n
