"""Decode-only measurements held against the model's decode-only path (`validate` rows with mode=decode_only, and
the rows validation.decode_bench reads from `vllm bench latency` and `sglang.bench_one_batch` results).

What it does: reads decode-only rows — a batch of `batch_size` sequences decoding, no prompts arriving — prices
each on the decode-only path of the closed form (Deployment.decode_only: the decode step at a fixed context, no
prefill interference; perfmodel.serving) and reports them as their own slice (MAPE and bias of TPOT; no TTFT).
Row conventions (docs/metrics.md, `servescope validate`: the decode-only slice):
  * concurrency = `batch_size`: the sequences in one decode step of the whole engine instance (all attention-DP
    ranks; unlike an aggregated row's per-rank batch_size, validation.validate);
  * context: the `context` column — every sequence holds that many tokens during the measured steps (fixed-context
    decode sweeps) — else a bench-latency-style row's `isl` (prompt) and `osl` (generated tokens): its decode steps
    run at contexts isl + 1 … isl + osl − 1, and the row is priced at their mean, isl + osl/2 (the steady-serving
    convention of Deployment.decode_context; the step's attention cost is linear in context);
  * what is measured, `measure`:
      step   the time of one decode step of the batch (the gap between two tokens of every sequence), from
             `silicon_tpot_ms` (ms), or `output_tok_s` as batch_size / output_tok_s, or SGLang's
             `median_decode_latency` (the median of the osl − 1 step times: the step at the median context,
             isl + osl/2); predicted = the decode-only TPOT at the context;
      batch  a whole static batch's end-to-end latency L (`latency_ms`; vLLM's `avg_latency`): one prefill of
             batch_size × isl tokens, then osl − 1 decode steps; the row's TPOT is L / osl (per generated token, the
             prefill's share included) and the prediction is (t_pf + (osl − 1) · TPOT_decode) / osl with
             t_pf = prefill_step(batch · isl tokens over batch sequences) / prefill_eff + prefill_overhead_s
             + n_mla · mla_prefill_layer_s + n_lin · linear_prefill_layer_s (the TTFT's t_pf of serving.py for the
             whole batch in one step: chunking it into several steps adds their launch overhead, not counted);
  * KV format: `kv_quant_mode` when given, else validation.validate's rule (fp8 with fp8/fp4 weights);
  * a row over OVER_CAPACITY × the sequences whose KV fits, or a `step` TPOT below the physical floor of the decode
    step at its batch, is skipped with the numbers (as aggregated rows are).
Bad input — a decode-only row without a context length, with a TTFT value, without a measured TPOT, batch size,
or with a cell that is not a number — is refused (DecodeRowError: file, line, row id and field), never skipped.
What it does not: read benchmark JSON (validation.decode_bench), fit anything (decode-only rows never enter the
efficiency fit, validation.fit, so their error is held out from it), format or print (report/validate_doc.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from servescope.errors import BadConfig, MeasurementError, ScenarioError, SpecError
from servescope.perfmodel.memory import max_concurrency
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import linear_layers, mla_layers, predict_arrays
from servescope.perfmodel.step import prefill_step
from servescope.units import MS_PER_S
from servescope.validation.validate import (
    _QUANT,
    DECODE_ONLY,
    OVER_CAPACITY,
    BadRow,
    _checkpoint_quant,
    _num,
    _quant,
    layout,
    mape,
    read_records,
)

STEP, BATCH = "step", "batch"
TTFT_COLUMNS = ("silicon_ttft_ms", "ttft_ms")
LAYOUT_COLUMNS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


class DecodeRowError(MeasurementError):
    """A decode-only row that cannot be priced as given (its file, line, row and field named)."""


@dataclass(frozen=True)
class Deployment:
    """What ran, in Scenario.build's vocabulary (scheme names, not the CSV's labels)."""

    model: str
    gpu: str
    backend: str = "vllm"
    engine_version: str = ""
    tp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    quant: str = "native"
    moe_quant: str | None = None
    kv_quant: str | None = None


@dataclass(frozen=True)
class DecodeRow:
    """One decode-only measurement: `tpot_ms` is the measured per-token time in the sense of `measure`."""

    id: str
    source: str
    deployment: Deployment
    concurrency: int
    context: int  # the decode steps' (mean) context, tokens
    tpot_ms: float
    measure: str = STEP  # STEP | BATCH (module docstring)
    isl: int = 0  # prompt tokens of a BATCH row (its one prefill)
    osl: int = 1  # generated tokens (BATCH: the steps it holds; both: the KV it grows)


@dataclass(frozen=True)
class DecodeResult:
    id: str
    source: str
    system: str
    backend: str
    model: str
    concurrency: int
    context: int
    measure: str
    tpot_ms: float
    pred_tpot_ms: float
    dominant: str

    @property
    def tpot_err(self) -> float:
        return abs(self.pred_tpot_ms - self.tpot_ms) / self.tpot_ms

    @property
    def tpot_signed(self) -> float:
        return self.pred_tpot_ms / self.tpot_ms - 1.0


@dataclass(frozen=True)
class DecodeValidation:
    """The decode-only slice: priced rows and the skipped ones with their reasons."""

    rows: list[DecodeResult]
    skipped: list[tuple[str, str]]

    @property
    def tpot_mape(self) -> float:
        return mape([r.tpot_err for r in self.rows])

    @property
    def tpot_bias(self) -> float:
        return mape([r.tpot_signed for r in self.rows])  # the mean of signed errors (mape is a plain mean)


def is_decode_only(r: dict[str, str]) -> bool:
    return (r.get("mode") or "").strip() == DECODE_ONLY


def _where(path: str, line: int, r: dict[str, str]) -> str:
    rid = (r.get("id") or "").strip()
    return f"{path}:{line}" + (f" (row {rid})" if rid else "")


def _cell(r: dict[str, str], name: str, where: str) -> float:
    """A number from column `name` (0.0 when absent or empty); DecodeRowError naming the field otherwise."""
    try:
        return _num(r.get(name))
    except BadRow as exc:
        raise DecodeRowError(f"{where}: field {name}: {exc}") from None


def csv_deployment(r: dict[str, str]) -> Deployment:
    """The deployment of a CSV row, read as validation.validate reads an aggregated row's (layout, quant labels)."""
    tp, ep, pp, dp = layout(r)
    w, e, kv = _quant(r)
    w, e = _checkpoint_quant(r["model_path"], w, e)
    kv_label = (r.get("kv_quant_mode") or "").strip()
    return Deployment(r["model_path"], r["system"], r["backend"], (r.get("backend_version") or "").strip(),
                      tp, ep, pp, dp, w, e, _QUANT.get(kv_label, kv_label) if kv_label else kv)


def parse_decode_row(r: dict[str, str], path: str, line: int) -> DecodeRow:
    """A decode-only CSV row -> DecodeRow (DecodeRowError naming the field when it cannot be priced)."""
    where = _where(path, line, r)
    for name in TTFT_COLUMNS:
        if (r.get(name) or "").strip():
            raise DecodeRowError(f"{where}: field {name}: a decode-only row has no TTFT (no prompts arrive); "
                                 "leave it empty or use mode=agg")
    for name in ("model_path", "system", "backend"):
        if not (r.get(name) or "").strip():
            raise DecodeRowError(f"{where}: field {name}: empty (a decode-only row needs its deployment)")
    for name in LAYOUT_COLUMNS:
        _cell(r, name, where)  # a damaged size is named here, before validate.layout reads it
    batch = _cell(r, "batch_size", where)
    if batch < 1:
        raise DecodeRowError(f"{where}: field batch_size: a decode-only row needs the batch (sequences decoding)")
    context, isl, osl = _context(r, where)
    measure, value = _measured(r, where, batch, isl, osl)
    rid = (r.get("id") or "").strip() or f"{Path(path).name}:{line}"
    return DecodeRow(rid, (r.get("source") or "").strip(), csv_deployment(r), int(batch), context, value, measure,
                     int(isl), max(int(osl), 1))


def _context(r: dict[str, str], where: str) -> tuple[int, float, float]:
    """(priced context, isl, osl): `context`, else isl + osl/2 (module docstring)."""
    ctx, isl, osl = _cell(r, "context", where), _cell(r, "isl", where), _cell(r, "osl", where)
    if (r.get("context") or "").strip():
        if ctx < 0:
            raise DecodeRowError(f"{where}: field context: negative ({ctx:g})")
        return int(ctx), isl, osl
    if not (isl >= 1 and osl >= 1):
        raise DecodeRowError(f"{where}: field context: a decode-only row needs its context length "
                             "(a `context` column, or `isl` and `osl` for a bench-latency-style row)")
    return int(isl + osl / 2.0), isl, osl


def _measured(r: dict[str, str], where: str, batch: float, isl: float, osl: float) -> tuple[str, float]:
    """(measure, measured ms per token) from latency_ms (BATCH), silicon_tpot_ms or output_tok_s (STEP)."""
    tpot, tok_s, lat = (_cell(r, c, where) for c in ("silicon_tpot_ms", "output_tok_s", "latency_ms"))
    if lat > 0:
        if not (isl >= 1 and osl >= 1):
            raise DecodeRowError(f"{where}: field isl: a latency_ms row needs `isl` and `osl` (its prefill and steps)")
        return BATCH, lat / osl
    if tpot > 0 or tok_s > 0:
        return STEP, tpot if tpot > 0 else batch * MS_PER_S / tok_s
    raise DecodeRowError(f"{where}: field silicon_tpot_ms: a decode-only row needs a measured TPOT "
                         "(silicon_tpot_ms, output_tok_s or latency_ms)")


def read_decode_csv(path: str | Path) -> list[DecodeRow]:
    """The decode-only rows of a validation CSV (BadConfig when the file cannot be read, validate.read_records)."""
    _, records = read_records(path)
    return [parse_decode_row(r, str(path), n) for r, n in records if is_decode_only(r)]


def _scenario(row: DecodeRow, cache: dict[tuple[object, ...], Scenario | str]) -> Scenario | str:
    d = row.deployment
    key = (d, row.context, row.osl)
    if key not in cache:
        try:
            cache[key] = Scenario.build(model=d.model, gpu=d.gpu, tp=d.tp, ep=d.ep, pp=d.pp, dp=d.dp, quant=d.quant,
                                        moe_quant=d.moe_quant, kv_quant=d.kv_quant, isl=row.context, osl=row.osl,
                                        backend=d.backend, engine_version=d.engine_version).with_(decode_only=True)
        except (ScenarioError, SpecError, BadConfig) as exc:
            cache[key] = str(exc)
    return cache[key]


def batch_prefill_s(sc: Scenario, batch: int, isl: int) -> float:
    """t_pf of a whole static batch (module docstring, `batch`): batch · isl prompt tokens in one prefill step."""
    e = sc.efficiency
    step = prefill_step(sc, batch * isl, batch).step_time_s
    return (step / e.prefill_eff + e.prefill_overhead_s + mla_layers(sc) * e.mla_prefill_layer_s
            + linear_layers(sc) * e.linear_prefill_layer_s)


def price(rows: list[DecodeRow]) -> DecodeValidation:
    """Every decode-only row priced on the decode-only path at its context (rows of one scenario in one call)."""
    cache: dict[tuple[object, ...], Scenario | str] = {}
    groups: dict[int, list[DecodeRow]] = defaultdict(list)
    scenarios: dict[int, Scenario] = {}
    skipped: list[tuple[str, str]] = []
    for r in rows:
        sc = _scenario(r, cache)
        if isinstance(sc, str):
            skipped.append((r.id, sc))
            continue
        groups[id(sc)].append(r)
        scenarios[id(sc)] = sc
    out: list[DecodeResult] = []
    for key, grp in groups.items():
        sc = scenarios[key]
        a = predict_arrays(sc, [r.concurrency for r in grp])
        cap = max(max_concurrency(sc, sc.isl + sc.osl / 2.0), 1)  # serving.py's: the KV of the mean context fits
        for i, r in enumerate(grp):
            why = _skip_reason(r, cap, float(a["floor"][i]) * MS_PER_S)
            if why:
                skipped.append((r.id, why))
                continue
            tpot = float(a["tpot_s"][i]) * MS_PER_S
            if r.measure == BATCH:
                tpot = (batch_prefill_s(sc, r.concurrency, r.isl) * MS_PER_S + (r.osl - 1) * tpot) / r.osl
            dom = max(a["terms"], key=lambda k: float(a["terms"][k][i]))
            d = r.deployment
            out.append(DecodeResult(r.id, r.source, d.gpu, d.backend, d.model, r.concurrency, r.context, r.measure,
                                    r.tpot_ms, tpot, dom))
    return DecodeValidation(out, skipped)


def _skip_reason(r: DecodeRow, cap: int, floor_ms: float) -> str:
    if r.concurrency > OVER_CAPACITY * cap:
        return (f"batch {r.concurrency} is over {OVER_CAPACITY:g}x the {cap} sequences whose KV cache fits this "
                f"layout at context {r.context}: the run cannot have held them")
    if r.measure == STEP and r.tpot_ms < floor_ms:
        return (f"below_floor: measured decode step {r.tpot_ms:.2f} ms is under the {floor_ms:.2f} ms physical floor "
                f"of a decode step of {r.concurrency} sequences at context {r.context}: not a plain decode step")
    return ""


def validate_decode_csv(path: str | Path) -> DecodeValidation | None:
    """The decode-only slice of a validation CSV; None when it has no decode-only rows."""
    rows = read_decode_csv(path)
    return price(rows) if rows else None


def by(rows: list[DecodeResult], attr: str) -> dict[str, list[DecodeResult]]:
    g: dict[str, list[DecodeResult]] = defaultdict(list)
    for r in rows:
        g[str(getattr(r, attr))].append(r)
    return dict(sorted(g.items()))


def merge(parts: list[DecodeValidation | None]) -> DecodeValidation | None:
    """One slice from several inputs (the CSV's rows and each benchmark file's)."""
    got = [p for p in parts if p is not None]
    if not got:
        return None
    return DecodeValidation([r for p in got for r in p.rows], [s for p in got for s in p.skipped])
