"""The pair ledger: measured before/after pairs of one mitigation each, and the plan's predictions held against them.

Does: read a ledger CSV (tests/data/planner/pairs_ledger.csv; columns below), one row per published A/B pair:
the deployment in `validate`'s columns, the plan's `track` that the change belongs to, what changed (`setting`),
the `metric` measured before and after, and the `source` link. Then, given one prediction per row (the plan's
gain and its range, made by planner.pair_check), it scores each row and summarises per track and overall:
    measured gain  before / after   for tpot_ms and kernel_us (a time: lower is better)
                   after / before   for output_tok_s (a rate: higher is better)
    sign right     the predicted and the measured gain fall on the same side of 1 (both within the row's
                   no-change band of 1 counts as right: "no change" predicted and seen); the band is ±NEUTRAL, or
                   the source's stated run-to-run noise relative to `before` where that is wider (a measured
                   change inside the noise has no sign)
    error          |predicted − measured| / measured (the row's absolute percentage error; MAPE is its mean)
    in range       gain_low ≤ measured ≤ gain_high (only rows whose prediction carries a range)
    a row whose source gives only an upper bound (speculative `below`) is sign-right when predicted under the
    bound and has no error.
Columns (docs/plan.md, "The pair ledger"): required `id`, DEPLOYMENT, `track`, `setting`, `metric`, `before`,
`after`, `source`; optional `noise` (the source's run-to-run spread, in the metric's unit), `interconnect`
(nvlink | pcie_p2p | pcie_no_p2p), `pcie_topology`, `spec_method`, `spec_k`, `acceptance` (mean accepted length,
AL), `kernel` (the kernel a kernel_us row timed), `change` (what the pair changed, machine-readable, e.g.
`kv=fp8`: the one option the track prices; planner.pair_check) and the speculative columns of SPEC_COLUMNS (read by
validation.spec_pairs: the existing speculative pricing).
Does not: price anything itself beyond building the deployment (planner.pair_check runs the plan), or render
(report.pairs_doc / pairs_text).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from servescope.errors import BadConfig, ScenarioError, SpecError
from servescope.perfmodel.scenario import Scenario

DEPLOYMENT = ("backend", "backend_version", "model_path", "system", "precision", "gemm_quant_mode",
              "moe_quant_mode", "kv_quant_mode", "isl", "osl", "batch_size", "tp_size", "pp_size",
              "attention_dp_size", "moe_ep_size")
REQUIRED = ("id", *DEPLOYMENT, "track", "setting", "metric", "before", "after", "source")
OPTIONAL = ("noise", "interconnect", "pcie_topology", "spec_method", "spec_k", "acceptance", "kernel", "change")
SPEC_COLUMNS = ("spec_kind", "spec_relative_to", "spec_engine", "spec_depth", "spec_width", "spec_draft_vocab",
                "context_len", "ref_row", "source_line", "note")
COLUMNS = (*REQUIRED, *OPTIONAL, *SPEC_COLUMNS)
METRICS = ("tpot_ms", "output_tok_s", "kernel_us")
TIME_METRICS = ("tpot_ms", "kernel_us")  # lower is better: gain = before / after
END_TO_END = ("tpot_ms", "output_tok_s")
NEUTRAL = 0.01  # a gain within ±1 % of 1 is "no change" for the sign test (below most sources' run-to-run noise)
_KV = {"": None, "fp8": "fp8", "bf16": "bf16", "fp16": "bf16", "auto": None}


@dataclass(frozen=True)
class Pair:
    """One ledger row, read and checked (`line` is its line in the file, the header being line 1)."""

    line: int
    id: str
    track: str
    setting: str
    metric: str
    before: float
    after: float
    source: str
    noise: float | None
    row: dict[str, str] = field(compare=False, repr=False)  # every cell, as read

    @property
    def measured_gain(self) -> float:
        """before / after for a time, after / before for a rate (module docstring)."""
        return self.before / self.after if self.metric in TIME_METRICS else self.after / self.before

    @property
    def no_change_band(self) -> float:
        """The relative change below which the measurement has no sign: NEUTRAL, or the stated run-to-run noise
        over `before` where wider (noise is in the metric's unit, the spread of one measurement)."""
        return max(NEUTRAL, self.noise / self.before) if self.noise is not None else NEUTRAL

    @property
    def concurrency(self) -> int:
        return max(1, int(float(self.row.get("batch_size") or 1)))

    @property
    def upper_bound(self) -> bool:
        """The source only says the gain is below `after / before` (a speculative `below` row)."""
        return self.cell("spec_kind") == "below"

    @property
    def end_to_end(self) -> bool:
        return self.metric in END_TO_END

    def cell(self, name: str) -> str:
        return (self.row.get(name) or "").strip()


def _where(path: Path, line: int, rid: str) -> str:
    return f"{path}: line {line}" + (f" ({rid})" if rid else "")


def _positive(path: Path, line: int, rid: str, row: dict[str, str], name: str) -> float:
    text = (row.get(name) or "").strip()
    try:
        x = float(text)
    except ValueError:
        raise BadConfig(f"{_where(path, line, rid)}: field {name}: not a number: {text[:40]!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise BadConfig(f"{_where(path, line, rid)}: field {name}: {text!r} must be a positive finite number "
                        "(a gain below zero, or none, is not a measurement)")
    return x


COUNTS = ("isl", "osl", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_ep_size")


def _count(path: Path, line: int, rid: str, row: dict[str, str], name: str) -> None:
    """A deployment's token count, concurrency or parallel size: a whole number >= 1."""
    text = (row.get(name) or "").strip()
    try:
        ok = float(text) >= 1 and float(text).is_integer()
    except (ValueError, OverflowError):
        ok = False
    if not ok:
        raise BadConfig(f"{_where(path, line, rid)}: field {name}: {text[:40]!r} must be a whole number >= 1 "
                        "(it does not describe a deployment)")


def read_ledger(path: str | Path, tracks: Iterable[str] | None = None) -> list[Pair]:
    """The ledger's rows; BadConfig naming the file, line, row id and field for the first bad row: a missing
    column or empty required cell (a missing `source` among them), an unknown `track` (when `tracks` is given),
    an unknown `metric`, a `before`/`after` that is not a positive number, an ISL/OSL, concurrency or parallel
    size that is not a whole number >= 1, or a duplicate id."""
    p = Path(path)
    known = tuple(tracks) if tracks is not None else None
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadConfig(f"{p}: cannot read the pair ledger: {exc.__class__.__name__}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise BadConfig(f"{p}: line 1: not a pair ledger: no column {', '.join(missing[:4])}")
    out: list[Pair] = []
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        rid = (row.get("id") or "").strip()
        for name in REQUIRED:
            if name in ("gemm_quant_mode", "moe_quant_mode", "kv_quant_mode", "backend_version", "precision"):
                continue  # may be empty: the checkpoint's own scheme, the engine's newest defaults
            if not (row.get(name) or "").strip():
                raise BadConfig(f"{_where(p, line, rid)}: field {name}: empty")
        track, metric = row["track"].strip(), row["metric"].strip()
        if known is not None and track not in known:
            raise BadConfig(f"{_where(p, line, rid)}: field track: unknown track {track!r}; known: {', '.join(known)}")
        if metric not in METRICS:
            raise BadConfig(f"{_where(p, line, rid)}: field metric: {metric!r} is not one of {', '.join(METRICS)}")
        if rid in seen:
            raise BadConfig(f"{_where(p, line, rid)}: field id: duplicate id")
        seen.add(rid)
        for name in COUNTS:
            _count(p, line, rid, row, name)
        before = _positive(p, line, rid, row, "before")
        after = _positive(p, line, rid, row, "after")
        noise = _positive(p, line, rid, row, "noise") if (row.get("noise") or "").strip() else None
        out.append(Pair(line, rid, track, row["setting"].strip(), metric, before, after, row["source"].strip(),
                        noise, {k: (v or "") for k, v in row.items() if isinstance(k, str)}))
    return out


def is_ledger(path: str | Path) -> bool:
    """True when the CSV's header has the ledger's `track` and `metric` columns."""
    with Path(path).open(newline="", encoding="utf-8-sig") as fh:
        header = next(csv.reader(fh), [])
    return "track" in header and "metric" in header


def deployment(pair: Pair, path: str | Path = "ledger") -> Scenario:
    """The row's deployment as validate builds a measured row's (validation.validate: layout, quantization
    labels, the checkpoint's own scheme for natively MXFP4 experts), plus the row's `interconnect` and
    `kv_quant_mode`; the before state (a cuda_graphs row's before runs eager). BadConfig naming the row and the field when it does not describe one."""
    from servescope.specs.hardware import load_gpu
    from servescope.specs.models import load_model
    from servescope.validation.validate import BadRow, _checkpoint_quant, _quant, layout

    where = _where(Path(path), pair.line, pair.id)
    r = pair.row
    for name, load in (("model_path", load_model), ("system", load_gpu)):
        try:
            load(r[name].strip())
        except (SpecError, BadConfig) as exc:
            raise BadConfig(f"{where}: field {name}: {str(exc).splitlines()[0][:160]}") from None
    try:
        tp, ep, pp, dp = layout(r)
        w, e, kv = _quant(r)
        w, e = _checkpoint_quant(r["model_path"].strip(), w, e)
        isl, osl = int(float(r["isl"])), int(float(r["osl"]))
    except (BadRow, ValueError, KeyError) as exc:
        raise BadConfig(f"{where}: field isl/osl/tp_size/pp_size/attention_dp_size/moe_ep_size: {exc}") from None
    kv_cell = pair.cell("kv_quant_mode").lower()
    kv = _KV.get(kv_cell, kv_cell) or kv
    version = pair.cell("backend_version")
    if pair.track == "custom_allreduce" and "+" not in version:  # measured running: the build allowed it
        version += "+pcie-ar"  # (planner.allreduce_paths: a build that lifts the PCIe gate)
    try:
        return Scenario.build(model=r["model_path"].strip(), gpu=r["system"].strip(), tp=tp, ep=ep, pp=pp, dp=dp,
                              quant=w, moe_quant=e, kv_quant=kv, isl=isl, osl=osl, backend=r["backend"].strip(),
                              interconnect=pair.cell("interconnect") or None,
                              engine_version=version, pcie_topology=pair.cell("pcie_topology") or None,
                              check_memory=False,
                              cuda_graphs=pair.track != "cuda_graphs")  # a CUDA-graph pair's before runs eager
    except (ScenarioError, SpecError) as exc:
        raise BadConfig(f"{where}: field deployment: {str(exc).splitlines()[0][:200]}") from None


@dataclass(frozen=True)
class Prediction:
    """The plan's answer for one row: its gain and range, or why it has none (`why_not`)."""

    gain: float | None
    low: float | None = None
    high: float | None = None
    why_not: str = ""
    how: str = ""  # what was priced: the plan's track at the row's concurrency, a per-kernel ratio, the spec pricing


@dataclass(frozen=True)
class PairCheck:
    pair: Pair
    prediction: Prediction

    @property
    def measured(self) -> float:
        return self.pair.measured_gain

    @property
    def priced(self) -> bool:
        return self.prediction.gain is not None

    @property
    def sign_right(self) -> bool | None:
        g = self.prediction.gain
        if g is None:
            return None
        if self.pair.upper_bound:  # a loss below the stated bound: right when predicted under it
            return g < self.measured
        band = self.pair.no_change_band
        return _side(g, band) == _side(self.measured, band)

    @property
    def error(self) -> float | None:
        g = self.prediction.gain
        return None if g is None or self.pair.upper_bound else abs(g - self.measured) / self.measured

    @property
    def in_range(self) -> bool | None:
        lo, hi = self.prediction.low, self.prediction.high
        if self.prediction.gain is None or lo is None or hi is None:
            return None
        return lo <= self.measured <= hi


def _side(gain: float, band: float = NEUTRAL) -> int:
    """+1 gains, −1 loses, 0 within ±band of no change."""
    return 0 if abs(gain - 1.0) <= band + 1e-9 else (1 if gain > 1.0 else -1)  # 1.01 is inside (float)


@dataclass(frozen=True)
class Summary:
    """One track's (or all tracks') scores: rows, rows priced, sign hit rate, MAPE, and range coverage (over the
    rows whose prediction has a range); None where no row counts."""

    name: str
    rows: int
    priced: int
    sign_hit_rate: float | None
    mape: float | None
    mape_end_to_end: float | None
    mape_kernel: float | None
    ranged: int
    coverage: float | None

    def as_dict(self) -> dict[str, float | int | str | None]:
        return {"track": self.name, "rows": self.rows, "priced": self.priced, "sign_hit_rate": self.sign_hit_rate,
                "mape": self.mape, "mape_end_to_end": self.mape_end_to_end, "mape_kernel": self.mape_kernel,
                "ranged": self.ranged, "coverage": self.coverage}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarise(name: str, checks: list[PairCheck]) -> Summary:
    priced = [c for c in checks if c.priced]
    signs = [1.0 if c.sign_right else 0.0 for c in priced]
    errs = [c.error for c in priced if c.error is not None]
    e2e = [c.error for c in priced if c.error is not None and c.pair.end_to_end]
    kern = [c.error for c in priced if c.error is not None and not c.pair.end_to_end]
    ranged = [c for c in priced if c.in_range is not None]
    cover = [1.0 if c.in_range else 0.0 for c in ranged]
    return Summary(name, len(checks), len(priced), _mean(signs), _mean(errs), _mean(e2e), _mean(kern),
                   len(ranged), _mean(cover))


def by_track(checks: list[PairCheck]) -> list[Summary]:
    """One Summary per track (in first-seen order), then `all`."""
    names = list(dict.fromkeys(c.pair.track for c in checks))
    return [summarise(n, [c for c in checks if c.pair.track == n]) for n in names] + [summarise("all", checks)]
