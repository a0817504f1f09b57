"""The plan held against the pair ledger: each measured before/after pair predicted by the plan's own track.

Does: read a ledger (validation.pairs, tracks checked against TRACK_KINDS), build every row's deployment first
(a row that does not describe one stops the run with one line), then predict each row:
  * speculative rows with a `spec_kind` — the existing speculative pricing (validation.spec_pairs: ratio rows
    against their anchor, `below` rows as bounds; anchors are not scored), no range;
  * any other row — `plan(deployment, objective tpot, concurrency = batch_size)` with every other track
    forbidden, read as the track's gain / gain_low / gain_high. At a fixed concurrency a rate's gain
    (output tok/s after / before) equals the TPOT gain (tok/s = concurrency / TPOT), so tpot_ms and
    output_tok_s rows read the same number;
  * a row with a `change` (optional column: what the pair changed, machine-readable, e.g. `kv=fp8`; the
    quantization track's vocabulary, planner.tracks_compute.parse_change) — the plan prices that one option, not
    its best (`plan(..., option=change)`); without one the track's best option, as `plan` picks it;
  * kernel_us rows — a per-call ratio where the track states one (custom_allreduce, nccl_tuning: the all-reduce
    call before / after, details `all_reduce_ratio`; split_k_attention: details `split_k_ratio`, from the row's
    `kernel` and its measured `before` handed to the plan as one traced kernel); otherwise unpriced, saying that
    the plan prices the track end to end.
A track the plan finds not applicable (e.g. the engine refuses it) is unpriced with the plan's reason.
Bad input: a `change` the track does not know, or on a row of a track that takes none, stops the run with one
line naming the file, line, row and field (checked with the deployments, before any pricing).
Does not: fit anything to the pairs (no constant here or in the plan is set from them), or render.
"""

from __future__ import annotations

from pathlib import Path

from servescope.errors import BadConfig, PlanError, ScenarioError
from servescope.perfmodel.scenario import Scenario
from servescope.planner.kernels import KernelEvidence, KernelRow, KindTime
from servescope.planner.plan import plan
from servescope.planner.tracks import TRACK_KINDS
from servescope.planner.tracks_compute import parse_change
from servescope.validation.pairs import Pair, PairCheck, Prediction, deployment, read_ledger
from servescope.validation.spec_pairs import SPEC_TRACK, evaluate, spec_pair

CHANGE_TRACKS = {"quantization": parse_change}  # tracks whose rows may say what changed: its parser

# track -> details key of new / old time per call
PER_CALL_RATIO = {"custom_allreduce": "all_reduce_ratio", "split_k_attention": "split_k_ratio"}


def check_pairs(path: str | Path) -> list[PairCheck]:
    """Every ledger row with its prediction, in file order (module docstring)."""
    p = Path(path)
    pairs = read_ledger(p, TRACK_KINDS)
    scenarios = {x.id: deployment(x, p) for x in pairs}  # every bad deployment said before any pricing
    for x in pairs:
        _check_change(x, p)
    spec_rows = [x for x in pairs if x.track == SPEC_TRACK and x.cell("spec_kind")]
    spec = {r.pair.id: r for r in evaluate([spec_pair(x, p) for x in spec_rows])} if spec_rows else {}
    out = []
    for x in pairs:
        if x.id in spec:
            r = spec[x.id]
            pred = (Prediction(None, why_not="anchor: the reference of its ratio rows, not scored")
                    if r.pair.kind == "anchor" else
                    Prediction(r.predicted, how=f"speculative pricing ({r.pair.kind} row, validation.spec_pairs)"))
        else:
            pred = predict(x, scenarios[x.id])
        out.append(PairCheck(x, pred))
    return out


def predict(x: Pair, sc: Scenario) -> Prediction:
    """The plan's gain for one row's track at its concurrency (module docstring)."""
    if x.track == SPEC_TRACK:
        return Prediction(None, why_not="a speculative row is priced by the speculative pricing: give spec_kind")
    others = tuple(k for k in TRACK_KINDS if k != x.track)
    try:
        t = plan(sc, "tpot", x.concurrency, forbid=others, kernels=_row_kernel(x),
                 option=x.cell("change") or None).track(x.track)
    except (PlanError, ScenarioError) as exc:
        return Prediction(None, why_not=f"the plan cannot be made: {str(exc).splitlines()[0]}")
    if not t.applicable or t.gain is None:
        return Prediction(None, why_not=f"not applicable: {t.why_not}")
    if x.metric == "kernel_us":
        key = PER_CALL_RATIO.get(x.track)
        ratio = t.details.get(key) if key else None
        if not ratio:
            return Prediction(None, why_not="the plan prices this track end to end, not per kernel")
        return Prediction(1.0 / float(ratio), how=f"the track's per-call ratio ({key})")
    what = f" ({x.cell('change')}: {t.details.get('option', '')})" if x.cell("change") else ""
    return Prediction(t.gain, t.gain_low, t.gain_high, how=f"plan {x.track}{what} at concurrency {x.concurrency}")


def _check_change(x: Pair, path: Path) -> None:
    """A row's `change`, when it has one: known to its track's parser; BadConfig (one line) otherwise."""
    text = x.cell("change")
    if not text:
        return
    where = f"{path}: line {x.line} ({x.id}): field change"
    parse = CHANGE_TRACKS.get(x.track)
    if parse is None:
        raise BadConfig(f"{where}: track {x.track} takes no change (only {', '.join(CHANGE_TRACKS)})")
    try:
        parse(text)
    except PlanError as exc:
        raise BadConfig(f"{where}: {exc}") from None


def _row_kernel(x: Pair) -> KernelEvidence | None:
    """A split_k_attention kernel_us row naming its `kernel`: that kernel's measured call (`before`, one call of one
    decode step) as the per-kernel numbers a trace would give (the track prices its split from the measured call)."""
    if x.track != "split_k_attention" or x.metric != "kernel_us" or not x.cell("kernel"):
        return None
    row = KernelRow("decode", x.cell("kernel"), "attention", None, None, 1, x.before, None, 1)
    return KernelEvidence(None, None, (row,), (KindTime("decode", 1, x.before, {"attention": x.before}),))

