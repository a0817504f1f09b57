"""Validation of the model against measured serving results (aiconfigurator `silicon_sample.csv` layout).

What it does: reads a CSV shaped like tests/data/validation/measured_serving_dev.csv, turns each aggregated
row into a Scenario (model, system, backend, TP/EP/attention-DP, weight/expert quantization, isl/osl) at the
measured concurrency, predicts TPOT and TTFT, and reports absolute percentage errors: MAPE overall and by
system, backend and model, and the worst rows. Every row it cannot model is listed with a reason
(disaggregated rows; layouts no engine runs; models that do not fit). An optional `arrival` column (closed,
poisson:RATE, burst:N) marks rows whose client was not a closed loop: validation.simulate_rows simulates them.
Rows with mode=decode_only are left out here: validation.decode_only prices and reports them as their own slice.
Row conventions (documented in docs/model.md §Validation):
  * concurrency = `silicon_concurrency` from `silicon_data_source` (else `batch_size`), per engine instance:
    `batch_size` is the batch of one attention rank (batch_size × attention_dp_size = silicon_concurrency on
    2,640 of the 2,836 aggregated dev rows and on every attention-DP row); where batch_size × attention_dp_size
    is smaller (29 rows, all TRT-LLM rows of the aic gap-analysis files, e.g. c = 224 with batch_size
    56 on a 4-GPU layout), the clients were spread over c / (batch_size × dp) instances and one instance
    served batch_size × dp of them: that is the row's concurrency;
  * KV cache fp8 for rows with fp8/fp4 weights, else bf16 (the published benchmark recipes for fp8/fp4
    checkpoints pass an fp8 KV-cache dtype; with bf16 KV several measured concurrencies would not fit);
  * a 4-bit label (nvfp4/mxfp4) on a checkpoint whose experts are natively MXFP4 (gpt-oss) runs the checkpoint as
    published — MXFP4 experts, bf16 attention and router — not NVFP4 everywhere (`_checkpoint_quant`); measured
    effect on the cross-validation: TPOT within 0.1 point, TTFT +0.5 point (kept: it is what the engines load);
  * a row whose measured TPOT is below the physical floor of a plain decode step (datasheet bandwidth and FLOP/s,
    collectives on their measured curves, no overheads: step.py floor_s) at the batch the engine must have held
    is skipped (`below_floor`): in a closed loop of c clients each client is either waiting for its first token
    or decoding, so (Little's law) the mean decode batch is b = c·D/(TTFT + D) with D = (osl − 1)·TPOT, all
    three measured; a TPOT under the floor at b is not a plain decode of that batch (speculative decoding, a
    run that did not hold its load) and no setting of the model can represent it;
  * some dump rows multiply sizes (e.g. tp_size 64 with moe_tp 8 × moe_ep 8 on an 8-GPU node, id "tp8_ep8"):
    when tp·dp exceeds the GPUs of one node (8 for *_sxm) and moe_tp == moe_ep, the layout is read as
    tp/moe_tp (or dp/moe_tp) with ep = moe_ep, which the row ids confirm.
What it does not: fit (validation.fit), format (report/validate_doc.py) or print (the CLI and
data-build/fit_efficiency.py render).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from servescope._paths import is_device
from servescope.errors import BadConfig, ScenarioError, SpecError
from servescope.perfmodel.efficiency import Efficiency
from servescope.perfmodel.memory import max_concurrency
from servescope.perfmodel.ranges import bounds, scenario_case
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import predict_arrays
from servescope.perfmodel.step import step_parts
from servescope.specs.models import load_model
from servescope.units import MS_PER_S

OVER_CAPACITY = 2.0  # rows claiming more in-flight sequences than this multiple of the KV capacity are skipped
DISAGG = "disaggregated prefill/decode is not modelled"
DECODE_ONLY = "decode_only"  # mode of a decode-only row: priced and reported apart (validation.decode_only)
_NODE_GPUS = {"gb200": 72, "gb300": 72}
_QUANT = {"fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "int4_wo": "int4-w4a16", "mxfp4": "mxfp4"}
# A measured series: one deployment (model, GPU, engine and version, precision, layout) at one ISL/OSL, its rows
# differing only in load (concurrency, batch) — the unit a user's own measurements calibrate (calibrate.levels).
SERIES_COLUMNS = ("backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
                  "gemm_quant_mode", "moe_quant_mode", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
                  "moe_ep_size")
_REQUIRED = ("id", "backend", "model_path", "system", "mode", "isl", "osl", "tp_size", "silicon_ttft_ms",
             "silicon_tpot_ms")
_REQUIRED_DECODE = ("backend", "model_path", "system", "mode", "tp_size")  # a file of decode-only rows only


@dataclass(frozen=True)
class Row:
    """One measured row, parsed; `scenario` is None when skipped (then `reason` says why)."""

    id: str
    system: str
    backend: str
    model: str
    concurrency: int
    tpot_ms: float
    ttft_ms: float
    scenario: Scenario | None
    reason: str = ""
    series: str = ""  # the measured series: every recorded set-up column but the load (SERIES_COLUMNS)
    arrival: str = ""  # the optional `arrival` column: closed | poisson:RATE | burst:N (validation.simulate_rows)
    source: str = ""  # the optional `source` column: where the row was measured (crossval's leave-one-source-out)


@dataclass(frozen=True)
class RowResult:
    id: str
    system: str
    backend: str
    model: str
    concurrency: int
    tpot_ms: float
    ttft_ms: float
    pred_tpot_ms: float
    pred_ttft_ms: float
    dominant: str
    pred_tpot_ms_low: float = float("nan")  # 80 % range from cross-validated error of the row's case (ranges.py)
    pred_tpot_ms_high: float = float("nan")
    pred_ttft_ms_low: float = float("nan")
    pred_ttft_ms_high: float = float("nan")

    @property
    def tpot_err(self) -> float:
        return abs(self.pred_tpot_ms - self.tpot_ms) / self.tpot_ms

    @property
    def ttft_err(self) -> float:
        return abs(self.pred_ttft_ms - self.ttft_ms) / self.ttft_ms


@dataclass(frozen=True)
class ValidationResult:
    rows: list[RowResult]
    skipped: list[tuple[str, str]]  # (id, reason)
    n_agg: int  # aggregated rows in the file

    @property
    def tpot_mape(self) -> float:
        return mape([r.tpot_err for r in self.rows])

    @property
    def ttft_mape(self) -> float:
        return mape([r.ttft_err for r in self.rows])

    @property
    def tpot_coverage(self) -> float:
        """Share of rows whose measured TPOT lies inside its predicted 80 % range."""
        return mape([float(r.pred_tpot_ms_low <= r.tpot_ms <= r.pred_tpot_ms_high) for r in self.rows])

    @property
    def ttft_coverage(self) -> float:
        return mape([float(r.pred_ttft_ms_low <= r.ttft_ms <= r.pred_ttft_ms_high) for r in self.rows])


def mape(errs: list[float]) -> float:
    """Mean absolute percentage error (a fraction) of a list of |pred − measured| / measured; NaN when empty."""
    return float(np.mean(errs)) if errs else float("nan")


class BadRow(ValueError):
    """A row that cannot be read (short, a cell that is not a finite number); it is skipped with this reason."""


MAX_CELL = 2.0**31  # sizes, lengths and counts beyond this are damage, not a serving configuration


def _num(v: str | None, default: float = 0.0) -> float:
    """A finite number from a cell; `default` when empty; BadRow when unreadable, non-finite or absurdly large."""
    if v is None or not v.strip():
        return default
    try:
        x = float(v)
    except ValueError:
        raise BadRow(f"not a number: {v[:40]!r}") from None
    if not abs(x) < MAX_CELL:  # also catches inf and nan
        raise BadRow(f"not a finite number below {MAX_CELL:.0f}: {v[:40]!r}")
    return x


def _concurrency(r: dict[str, str]) -> int:
    """Requests in flight on one engine instance: `silicon_concurrency`, or batch_size × attention-DP ranks when
    that is smaller (module docstring: the run spread its clients over several instances)."""
    m = re.search(r"silicon_concurrency=(\d+)", r.get("silicon_data_source", ""))
    b = _num(r.get("batch_size", ""), 0.0)
    if not m:
        return int(b) if b >= 1 else 1
    c = int(_num(m.group(1)))
    per_instance = b * max(_num(r.get("attention_dp_size", ""), 1.0), 1.0)
    return int(per_instance) if 1 <= per_instance < c else c


def layout(r: dict[str, str]) -> tuple[int, int, int, int]:
    """(tp, ep, pp, dp) of a row, repairing the multiplied-sizes quirk (see module docstring)."""
    tp = max(int(_num(r.get("tp_size", ""), 1)), 1)
    dp = max(int(_num(r.get("attention_dp_size", ""), 1)), 1)
    pp = max(int(_num(r.get("pp_size", ""), 1)), 1)
    mtp = max(int(_num(r.get("moe_tp_size", ""), 1)), 1)
    mep = max(int(_num(r.get("moe_ep_size", ""), 1)), 1)
    node = _NODE_GPUS.get(r["system"], 8)
    if tp * dp > node and mtp == mep > 1 and tp * dp == mtp * mep:
        tp, dp = (tp // mtp if tp > 1 else 1), (dp // mtp if dp > 1 else 1)
    elif tp * dp > node and tp == dp and mtp == 1 and mep == tp * dp:  # e.g. tp 4, dp 4, ep 16: "tp4_ep4"
        tp, mep = 1, dp
    return tp, mep, pp, dp


def _quant(r: dict[str, str]) -> tuple[str, str | None, str | None]:
    g, e = r.get("gemm_quant_mode", "").strip(), r.get("moe_quant_mode", "").strip()
    weights = "native" if not g else ("bf16" if g == "int4_wo" else _QUANT.get(g, g))
    experts = _QUANT.get(e, e) if e else None
    low = g in ("fp8", "fp8_block", "nvfp4")
    kv = "fp8" if low else "bf16"
    return weights, experts, kv


def _checkpoint_quant(model: str, weights: str, experts: str | None) -> tuple[str, str | None]:
    """A 4-bit label on a checkpoint whose experts are natively MXFP4 (gpt-oss: MXFP4 experts, bf16 attention and
    router) is the checkpoint as published: engines load it as is (no NVFP4 variant of it is served), so the row
    runs the native scheme, not NVFP4 everywhere. Other labels stand (an fp4 DeepSeek-R1 row is NVIDIA's NVFP4
    checkpoint)."""
    if experts not in ("nvfp4", "mxfp4") and weights not in ("nvfp4", "mxfp4"):
        return weights, experts
    try:
        native = load_model(model).native_quant
    except (SpecError, BadConfig):
        return weights, experts
    return ("native", None) if native.experts.name == "mxfp4" else (weights, experts)


def parse_row(r: dict[str, str], cache: dict[tuple[object, ...], Scenario | str] | None = None) -> Row:
    """A CSV row -> Row with a Scenario, or with the reason it is skipped. Rows with equal settings share one
    Scenario object through `cache` (so evaluation groups them into one vectorised call)."""
    arrival = (r.get("arrival") or "").strip()
    if arrival:
        from servescope.simulate.workload import Arrival

        try:
            Arrival.parse(arrival)
        except ScenarioError as exc:
            raise BadRow(str(exc)) from None

    def row(scenario: Scenario | None, reason: str = "") -> Row:
        return Row(r["id"], r["system"], r["backend"], r["model_path"], _concurrency(r),
                   _num(r["silicon_tpot_ms"]), _num(r["silicon_ttft_ms"]), scenario, reason,
                   "|".join(str(r.get(c) or "") for c in SERIES_COLUMNS), arrival, (r.get("source") or "").strip())

    if r["mode"] != "agg":
        return row(None, DISAGG)
    if _num(r["silicon_tpot_ms"]) <= 0 or _num(r["silicon_ttft_ms"]) <= 0:
        return row(None, "no measured TPOT/TTFT")
    tp, ep, pp, dp = layout(r)
    w, e, kv = _quant(r)
    w, e = _checkpoint_quant(r["model_path"], w, e)
    isl, osl = int(_num(r["isl"])), int(_num(r["osl"]))
    version = (r.get("backend_version") or "").strip()  # the engine release: its defaults (specs.engines)
    key = (r["model_path"], r["system"], tp, ep, pp, dp, w, e, kv, isl, osl, r["backend"], version)
    cache = {} if cache is None else cache
    if key not in cache:
        try:
            cache[key] = Scenario.build(model=r["model_path"], gpu=r["system"], tp=tp, ep=ep, pp=pp, dp=dp,
                                        quant=w, moe_quant=e, kv_quant=kv, isl=isl, osl=osl, backend=r["backend"],
                                        engine_version=version)
        except (ScenarioError, SpecError) as exc:
            cache[key] = str(exc)
    sc = cache[key]
    if isinstance(sc, str):
        return row(None, sc)
    cap = max_concurrency(sc, sc.isl + sc.osl / 2.0)
    if _concurrency(r) > OVER_CAPACITY * cap:
        return row(None, f"concurrency {_concurrency(r)} is over {OVER_CAPACITY:g}x the {cap} sequences whose KV cache "
                         f"fits this layout (mean context {sc.isl + sc.osl // 2}): the row cannot have held them")
    return row(sc)


def read_records(path: str | Path) -> tuple[list[str], list[tuple[dict[str, str], int]]]:
    """(columns, [(row, line number)]) of a validation CSV; BadConfig naming the file when it cannot be read."""
    p = Path(path)
    if is_device(p):
        raise BadConfig(f"{p}: a device, not a CSV file")
    try:
        with p.open(newline="", encoding="utf-8-sig") as f:  # -sig: a byte-order mark is not part of `id`
            reader = csv.DictReader(f)
            records = [(r, reader.line_num) for r in reader]
            return list(reader.fieldnames or []), records
    except FileNotFoundError:
        raise BadConfig(f"{p}: no such file") from None
    except IsADirectoryError:
        raise BadConfig(f"{p}: is a folder, not a CSV file") from None
    except UnicodeDecodeError as exc:
        raise BadConfig(f"{p}: not UTF-8 text (byte {exc.start}; a binary or Latin-1 file?)") from None
    except csv.Error as exc:
        raise BadConfig(f"{p}: not a readable CSV: {exc}") from None


def read_rows(path: str | Path) -> list[Row]:
    """The serving rows of a validation CSV (decode-only rows left out: validation.decode_only)."""
    fields, records = read_records(path)
    serving = [(r, n) for r, n in records if (r.get("mode") or "").strip() != DECODE_ONLY]
    missing = [c for c in (_REQUIRED if serving or not records else _REQUIRED_DECODE) if c not in fields]
    if missing:
        raise BadConfig(f"{Path(path)}: missing columns {', '.join(missing)}")
    cache: dict[tuple[object, ...], Scenario | str] = {}
    return below_floor([_parse_or_skip(r, cache, n) for r, n in serving])


def _parse_or_skip(r: dict[str, str], cache: dict[tuple[object, ...], Scenario | str], line: int) -> Row:
    """parse_row, or a skipped Row saying why the row cannot be read (one bad row never stops the file)."""
    try:
        short = [k for k, v in r.items() if v is None]  # DictReader fills a short row's missing cells with None
        if short:
            raise BadRow(f"short row: no value for {', '.join(short[:3])}")
        return parse_row(r, cache)
    except BadRow as exc:
        text = {k: str(v) for k, v in r.items() if isinstance(k, str) and isinstance(v, str)}
        return Row(text.get("id") or f"line {line}", text.get("system", ""), text.get("backend", ""),
                   text.get("model_path", ""), 0, float("nan"), float("nan"), None, f"unreadable row: {exc}")


def below_floor(rows: list[Row]) -> list[Row]:
    """Rows whose measured TPOT is below the decode-step floor at their Little's-law batch (module docstring),
    turned into skipped rows with the numbers in the reason; the others unchanged, order kept."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r.scenario is not None:
            groups[id(r.scenario)].append(i)
    out = list(rows)
    for idx in groups.values():
        sc = rows[idx[0]].scenario
        assert sc is not None
        c = np.array([rows[i].concurrency for i in idx], dtype=float)
        tpot_s = np.array([rows[i].tpot_ms for i in idx]) / MS_PER_S
        ttft_s = np.array([rows[i].ttft_ms for i in idx]) / MS_PER_S
        d = (sc.osl - 1) * tpot_s
        b = np.maximum(c * d / (ttft_s + d), 1.0)
        floor_s = step_parts(sc, b, sc.isl + sc.osl / 2.0, 1).floor_s * np.ones_like(b)
        for j, i in enumerate(idx):
            if tpot_s[j] < floor_s[j]:
                out[i] = replace(rows[i], scenario=None, reason=(
                    f"below_floor: measured TPOT {tpot_s[j] * MS_PER_S:.2f} ms is under the {floor_s[j] * MS_PER_S:.2f} ms "
                    f"physical floor of a decode step at the {b[j]:.0f} sequences the run held (Little's law from its "
                    f"concurrency, TTFT and TPOT): not a plain decode of that batch"))
    return out


def evaluate(rows: list[Row], efficiency: dict[tuple[str, str], Efficiency] | None = None) -> ValidationResult:
    """Predict every modelled row (grouped by scenario so each group is one vectorised call). `efficiency`
    optionally overrides the efficiencies per (generation, backend)."""
    groups: dict[int, list[Row]] = defaultdict(list)
    for r in rows:
        if r.scenario is not None:
            groups[id(r.scenario)].append(r)
    out: list[RowResult] = []
    for grp in groups.values():
        sc = grp[0].scenario
        assert sc is not None
        if efficiency is not None:
            key = (str(sc.gpu.generation), sc.backend)
            if key in efficiency:
                sc = replace(sc, efficiency=efficiency[key])
        a = predict_arrays(sc, [r.concurrency for r in grp])
        terms = a["terms"]
        case = scenario_case(sc)
        (t_lo, t_hi), (f_lo, f_hi) = bounds(case, "tpot"), bounds(case, "ttft")
        for i, r in enumerate(grp):
            dom = max(terms, key=lambda k: float(terms[k][i]))
            tpot, ttft = float(a["tpot_s"][i]) * MS_PER_S, float(a["ttft_s"][i]) * MS_PER_S
            out.append(RowResult(r.id, r.system, r.backend, r.model, r.concurrency, r.tpot_ms, r.ttft_ms,
                                 tpot, ttft, dom, tpot * t_lo, tpot * t_hi, ttft * f_lo, ttft * f_hi))
    skipped = [(r.id, r.reason) for r in rows if r.scenario is None]
    n_agg = sum(1 for r in rows if r.reason != DISAGG)
    return ValidationResult(out, skipped, n_agg)


def validate_csv(path: str | Path) -> ValidationResult:
    """Predicted vs measured TPOT/TTFT for every row of a validation CSV."""
    return evaluate(read_rows(path))

