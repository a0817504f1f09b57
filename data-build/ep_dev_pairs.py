"""The `expert_parallel` track held against the dev CSV's EP-on/EP-off pairs, out of fold, written into docs/plan.md.

Usage: .venv/bin/python data-build/ep_dev_pairs.py [--dry-run] [--workers N]
The pair ledger has no public EP pair; tests/data/validation/measured_serving_dev.csv has rows that differ only in
whether the experts are tensor- or expert-parallel. The global efficiency fit (specs/data/efficiency.toml) saw them,
so the shipped constants score them in sample. Headline: out of fold, leave one model out exactly as
data-build/validation_report.py cross-validates (validation.crossval.cross_validate, same start and backend
overrides); both rows of a pair have one model, so one fold predicts both. Leave one system out beside it.
Matching rule (find_pairs): two rows of the CSV are the sides of one pair when
  * every column is equal except `id`, `silicon_data_source`, the measured `silicon_ttft_ms` / `silicon_tpot_ms`
    and EXPERT_COLUMNS (moe_tp_size, moe_ep_size and their prefill_ / decode_ twins): same model, system, backend
    and version, precision, quantization modes, mode, ISL, OSL, batch_size, tp_size, pp_size, attention_dp_size;
  * both are modelled (validation.validate: mode agg, within the KV capacity, above the step floor) at the same
    modelled concurrency (validate's: the source's silicon_concurrency, capped by batch_size × attention DP);
  * one has moe_ep_size 1 (EP off, experts sharded over moe_tp_size GPUs: `before`), the other moe_ep_size > 1
    (EP on: `after`) with the same moe_tp_size × moe_ep_size (the same GPUs hold the experts).
The rows of one side (same settings, repeated runs) are averaged (the model gives them one prediction). An `after`
with EP over every GPU of the layout (ep = tp × attention DP) is the track's own layout ("EP with TP attention",
planner/tracks_ep.py); 1 < ep < tp × DP is a hybrid the track does not propose, priced by the same model.
Scores (validation.pairs, as the ledger: PairCheck / summarise): gain = TPOT before / after; sign right within the
ledger's ±1 % no-change band; gain MAPE; range coverage by the plan's rule (planner.gain_range: plan_range in
sample, PlanRange.gain on the fold's case's ratio quantiles out of fold: system_seen / system_unseen).
Plan check: on every EP-over-all-GPUs pair the plan's expert_parallel track (plan(before, "tpot", concurrency), other
tracks forbidden; its "EP with TP attention" option) must equal the model's in-sample ratio: the score is the plan's.
Writes docs/plan.md between BEGIN and END, right after the plan-ledger block (tests/test_ep_dev_pairs_doc.py
recomputes the in-sample part and the structure; not the cross-validation, about a minute on two cores). Rerun
after a pricing or fit change. Does not: fit or tune anything, price anything itself, touch the plan-ledger block.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from servescope.perfmodel import ranges  # noqa: E402
from servescope.perfmodel.efficiency import backend_overrides, global_efficiency  # noqa: E402
from servescope.perfmodel.scenario import Scenario  # noqa: E402
from servescope.planner.gain_range import PlanRange, plan_range  # noqa: E402
from servescope.validation.crossval import CASE_OF_GROUPING, cross_validate  # noqa: E402
from servescope.validation.fit import fit_data, predict_data  # noqa: E402
from servescope.validation.pairs import Pair, PairCheck, Prediction, summarise  # noqa: E402
from servescope.validation.validate import Row, read_records, read_rows  # noqa: E402

DEV = ROOT / "tests" / "data" / "validation" / "measured_serving_dev.csv"
PLAN_MD = ROOT / "docs" / "plan.md"
BEGIN = "<!-- ep-dev-pairs: begin (written by data-build/ep_dev_pairs.py; do not edit by hand) -->"
END = "<!-- ep-dev-pairs: end -->"
BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?" + re.escape(END), re.S)
LEDGER_END = "<!-- plan-ledger: end -->"  # data-build/plan_ledger.py's block; this one follows it
NOT_SETTINGS = ("id", "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms")
EXPERT_COLUMNS = ("moe_tp_size", "moe_ep_size", "prefill_moe_tp_size", "prefill_moe_ep_size", "decode_moe_tp_size",
                  "decode_moe_ep_size")
GROUPINGS = {"leave_one_model_out": "model", "leave_one_system_out": "system"}
HEADLINE = "leave_one_model_out"
TRACK, TRACK_LAYOUT = "expert_parallel", "EP with TP attention"
FULL, HYBRID = "EP over all GPUs (the track's layout)", "hybrid EP (1 < EP < GPUs)"
WIDTH = 116


@dataclass(frozen=True)
class Side:
    """One expert layout of a pair: its rows (repeats of one setting), their mean measured TPOT, one scenario."""

    ids: tuple[str, ...]
    moe_tp: int
    moe_ep: int
    tpot_ms: float
    scenario: Scenario
    concurrency: int


@dataclass(frozen=True)
class EpPair:
    box: str  # model | system | backend version | precision
    load: str  # concurrency, ISL x OSL
    before: Side  # EP off
    after: Side  # EP on

    @property
    def full(self) -> bool:
        return self.after.scenario.ep == self.after.scenario.tp * self.after.scenario.dp

    @property
    def kind(self) -> str:
        return FULL if self.full else HYBRID

    @property
    def name(self) -> str:
        b, a = self.before, self.after
        return f"{self.box} | {self.load} | moe TP{b.moe_tp}×EP{b.moe_ep} → TP{a.moe_tp}×EP{a.moe_ep}"


@dataclass(frozen=True)
class Found:
    pairs: list[EpPair]
    groups: int  # settings of the CSV seen with more than one expert layout
    dropped: Counter[str]  # why a group or a side gave no pair -> count
    tpot_ms: dict[str, float]  # measured TPOT of every paired row


def _size(text: str | None) -> int:
    return max(1, int(float((text or "").strip() or 1)))  # the rows are modelled: validate read their sizes


def find_pairs(records: Iterable[dict[str, str]], rows: Sequence[Row]) -> Found:
    """Every same-load EP-off/EP-on pair of the CSV (module docstring, the matching rule); `rows` = read_rows."""
    by_id = {r.id: r for r in rows}
    groups: dict[tuple[tuple[str, str], ...], dict[tuple[str, ...], list[dict[str, str]]]] = defaultdict(
        lambda: defaultdict(list))
    for rec in records:
        key = tuple((c, (v or "").strip()) for c, v in rec.items()
                    if isinstance(c, str) and c not in NOT_SETTINGS + EXPERT_COLUMNS)
        groups[key][tuple((rec.get(c) or "").strip() for c in EXPERT_COLUMNS)].append(rec)
    pairs: list[EpPair] = []
    dropped: Counter[str] = Counter()
    n_groups = 0
    for key, layouts in groups.items():
        if len(layouts) < 2:
            continue
        n_groups += 1
        kd = dict(key)
        if kd.get("mode") != "agg":
            dropped[f"{kd.get('mode')} settings, not modelled (validate prices aggregated serving)"] += 1
            continue
        sides: dict[tuple[int, int, int], list[Row]] = defaultdict(list)  # (concurrency, moe_tp, moe_ep) -> rows
        for recs in layouts.values():
            for rec in recs:
                r = by_id.get(rec["id"])
                if r is None or r.scenario is None:
                    why = r.reason.split(":")[0] if r is not None else "not read"
                    dropped[f"row not modelled ({why[:60]})"] += 1
                    continue
                sides[(r.concurrency, _size(rec.get("moe_tp_size")), _size(rec.get("moe_ep_size")))].append(r)
        box = " | ".join([kd["model_path"].split("/")[-1], kd["system"], f"{kd['backend']} {kd['backend_version']}",
                          kd["precision"]])
        used: set[tuple[int, int, int]] = set()
        for c, mtp, mep in sorted(k for k in sides if k[2] == 1):
            for c2, mtp2, mep2 in sorted(k for k in sides if k[0] == c and k[2] > 1 and k[1] * k[2] == mtp * mep):
                a, b = _side(sides[(c, mtp, mep)], mtp, mep), _side(sides[(c2, mtp2, mep2)], mtp2, mep2)
                if a.scenario is b.scenario:
                    dropped["both sides are one scenario to the model"] += 1
                    continue
                pairs.append(EpPair(box, f"c{c} {kd['isl']}×{kd['osl']}", a, b))
                used |= {(c, mtp, mep), (c2, mtp2, mep2)}
        for k, rs in sides.items():
            if k not in used:
                dropped["modelled row with no other expert layout at its modelled concurrency"] += len(rs)
    pairs.sort(key=lambda p: (p.box, p.before.concurrency, p.load, p.after.moe_ep))
    tpot = {i: by_id[i].tpot_ms for p in pairs for side in (p.before, p.after) for i in side.ids}
    return Found(pairs, n_groups, dropped, tpot)


def _side(rows: list[Row], moe_tp: int, moe_ep: int) -> Side:
    sc = rows[0].scenario
    assert sc is not None and all(r.scenario is sc for r in rows), "one setting, one scenario (validate's cache)"
    return Side(tuple(r.id for r in rows), moe_tp, moe_ep, statistics.fmean(r.tpot_ms for r in rows), sc,
                rows[0].concurrency)


def load(csv_path: Path = DEV) -> tuple[Found, list[Row]]:
    """The pairs of the CSV and its parsed rows."""
    _, records = read_records(csv_path)
    rows = read_rows(csv_path)
    return find_pairs((r for r, _ in records), rows), rows


def in_sample(found: Found, rows: Sequence[Row]) -> dict[str, float]:
    """Predicted TPOT (s) of every pair row with the shipped constants (global fit + backend overrides)."""
    want = {i for p in found.pairs for s in (p.before, p.after) for i in s.ids}
    data = fit_data([r for r in rows if r.id in want])
    tp, _ = predict_data(data, global_efficiency(), backend_overrides())
    return dict(zip(data.ids, tp.tolist(), strict=True))


def out_of_fold(rows: Sequence[Row], workers: int = 2) -> dict[str, dict[str, float]]:
    """grouping -> row id -> out-of-fold predicted TPOT (s), as data-build/validation_report.py cross-validates."""
    data = fit_data(list(rows))
    cv = cross_validate(data, global_efficiency(), groupings=GROUPINGS, workers=workers, overrides=backend_overrides())
    return {g: dict(zip(data.ids, cv.pred_tpot_s[g].tolist(), strict=True)) for g in GROUPINGS}


def predicted_gain(p: EpPair, pred: dict[str, float]) -> float:
    before = statistics.fmean(pred[i] for i in p.before.ids)
    return before / statistics.fmean(pred[i] for i in p.after.ids)


def _range(case: str | None, p: EpPair) -> PlanRange:
    """The plan's range rule: its own (plan_range) for in sample, the fold's case's ratio quantiles otherwise."""
    if case is None:
        return plan_range(p.before.scenario, None)
    q = ranges.change_bounds(case)
    assert q is not None, case
    return PlanRange("cross_validated", case, "", ratio_q=(q[0], q[1]), pairs=q[2])


def score(found: Found, pred: dict[str, float], case: str | None = None) -> list[PairCheck]:
    """Each pair scored as a ledger row (validation.pairs): before/after TPOT measured, gain predicted, range."""
    out = []
    for n, p in enumerate(found.pairs, start=1):
        g = predicted_gain(p, pred)
        lo, hi = _range(case, p).gain(g, g)
        pair = Pair(n, f"ep-dev-{n}", TRACK, p.name, "tpot_ms", p.before.tpot_ms, p.after.tpot_ms, str(DEV.name),
                    None, {"batch_size": str(p.before.concurrency)})
        out.append(PairCheck(pair, Prediction(g, lo, hi, how="model TPOT ratio")))
    return out


def plan_check(pairs: Iterable[EpPair], pred: dict[str, float]) -> list[tuple[EpPair, float, float, str]]:
    """(pair, the plan track's gain for the pair's layout, the model's in-sample ratio, the track's best layout)."""
    from servescope.planner.plan import plan
    from servescope.planner.tracks import TRACK_KINDS

    others = tuple(k for k in TRACK_KINDS if k != TRACK)
    out = []
    for p in pairs:
        t = plan(p.before.scenario, "tpot", p.before.concurrency, forbid=others).track(TRACK)
        out.append((p, float(t.details["options"][TRACK_LAYOUT]), predicted_gain(p, pred), str(t.details["layout"])))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}–{max(xs):.2f})"


def table(checks: list[PairCheck], found: Found) -> list[str]:
    """One evaluation: per kind of pair, the ledger's scores and the measured / predicted gains."""
    lines = ["| pairs | n | measured gain, median (range) | predicted gain, median (range) | sign hit rate | "
             "gain MAPE | range coverage |", "|---|---:|---|---|---:|---:|---:|"]
    for name in (FULL, HYBRID, "all"):
        cs = [c for c, p in zip(checks, found.pairs, strict=True) if name in ("all", p.kind)]
        if cs:
            s = summarise(name, cs)
            lines.append(f"| {name} | {s.rows} | {_spread([c.measured for c in cs])} | "
                         f"{_spread([c.prediction.gain or 0.0 for c in cs])} | {_pct(s.sign_hit_rate)} | "
                         f"{_pct(s.mape_end_to_end)} | {_pct(s.coverage)} |")
    return lines


def by_box(found: Found, oof: list[PairCheck], ins: list[PairCheck]) -> list[str]:
    lines = ["| model, system, engine, precision | pairs | measured gain | predicted, out of fold | "
             "predicted, in sample | signs right (out of fold) |", "|---|---:|---|---|---|---:|"]
    for box in dict.fromkeys(p.box for p in found.pairs):
        idx = [n for n, p in enumerate(found.pairs) if p.box == box]
        lines.append(f"| {box.replace(' | ', ', ')} | {len(idx)} | {_spread([oof[n].measured for n in idx])} | "
                     f"{_spread([oof[n].prediction.gain or 0.0 for n in idx])} | "
                     f"{_spread([ins[n].prediction.gain or 0.0 for n in idx])} | "
                     f"{sum(bool(oof[n].sign_right) for n in idx)}/{len(idx)} |")
    return lines


def no_change(checks: list[PairCheck]) -> str:
    """The predictor that says EP changes nothing (gain 1), scored the same way: the floor to beat."""
    s = summarise("no change", [PairCheck(c.pair, Prediction(1.0)) for c in checks])
    return f"sign {_pct(s.sign_hit_rate)}, MAPE {_pct(s.mape_end_to_end)}"


def _wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_on_hyphens=False)


def in_sample_lines(found: Found, ins: list[PairCheck]) -> list[str]:
    """The in-sample part of the block (tests/test_ep_dev_pairs_doc.py recomputes it)."""
    return ["In sample (the shipped constants, fitted on these very rows; the plan's own number and range today):",
            "", *table(ins, found)]


PLAN_TOL = 1e-9  # relative: the plan's number and the model's ratio are one computation


def plan_lines(checked: list[tuple[EpPair, float, float, str]]) -> list[str]:
    """What the plan check found: the plan's track gives the model's ratio (within PLAN_TOL) on the checked pairs."""
    if not checked:
        return []
    worst = max(abs(a / b - 1.0) for _, a, b, _ in checked)
    agree = f"within {PLAN_TOL:g} relative" if worst <= PLAN_TOL else f"NOT: largest relative difference {worst:.2g}"
    same = sum(best == TRACK_LAYOUT for *_, best in checked)
    return [_wrap(f"The plan's number: on all {len(checked)} EP-over-all-GPUs pairs the plan's `{TRACK}` track "
                  f"(`plan(before, tpot, concurrency)`, other tracks forbidden; its \"{TRACK_LAYOUT}\" option, "
                  f"shipped constants) gives the model's in-sample TPOT ratio of the pair's two rows ({agree}), so "
                  f"the in-sample table is what the plan says; the track's best option is that layout on {same} of "
                  "them (on the others an attention-DP EP layout the pairs did not measure). The hybrid pairs are not "
                  "a layout the track proposes; the same model prices them (`model`, `sweep`).")]


REPEAT_DIFFERS = 0.005  # a side's rows whose TPOTs differ by more than this (max/min − 1) are distinct runs


def repeat_spread(found: Found) -> tuple[int, int, float]:
    """(sides of more than one row, of them those with TPOTs > REPEAT_DIFFERS apart, the largest max/min − 1)."""
    sides = {s.ids for p in found.pairs for s in (p.before, p.after) if len(s.ids) > 1}
    spreads = [max(t) / min(t) - 1.0 for t in ([found.tpot_ms[i] for i in ids] for ids in sides)]
    return len(spreads), sum(x > REPEAT_DIFFERS for x in spreads), max(spreads, default=0.0)


def intro_lines(found: Found) -> list[str]:
    """The block's heading and what a pair is, with the counts (no cross-validation needed)."""
    drops = "; ".join(f"{n} × {why}" for why, n in sorted(found.dropped.items(), key=lambda x: (-x[1], x[0])))
    boxes = len({p.box for p in found.pairs})
    full = sum(p.full for p in found.pairs)
    return [
        "### `expert_parallel` against the dev CSV's EP pairs (out of fold)",
        "",
        _wrap(f"No public pair measures EP against TP, but `{DEV.relative_to(ROOT)}` has {found.groups} settings run "
              "with more than one expert layout. A pair is two modelled rows equal in every column but the expert "
              "layout (moe_tp_size, moe_ep_size and their prefill_/decode_ twins) and the measurement, at the same "
              "modelled concurrency, one with EP off (moe_ep_size 1), one with EP on over the same GPUs (moe_tp × "
              f"moe_ep equal); repeated runs of a side are averaged (data-build/ep_dev_pairs.py, the exact rule in "
              f"its docstring). {len(found.pairs)} pairs on {boxes} boxes, {full} of them EP over all GPUs of the "
              f"layout (the track's own layout), {len(found.pairs) - full} hybrid (dropped: {drops or 'none'}). "
              "Gain = TPOT EP off / EP on; scored as the ledger scores a row (validation/pairs.py: sign within the "
              "±1 % no-change band, gain MAPE, the plan's 80 % range rule, planner/gain_range.py)."),
    ]


def caveat_lines(found: Found) -> list[str]:
    n, differ, top = repeat_spread(found)
    return [_wrap("Caveats: the dev CSV comes from the same collector as the measured per-op curves the model reads, "
                  "so this checks the fit's transfer across models (and systems), not across collectors. The range "
                  "quantiles (specs/data/ranges.json `change_error`) are themselves out-of-fold errors of same-box, "
                  "same-load layout pairs of this CSV, these pairs among them (a small share), so coverage is partly "
                  f"by construction. Of the {n} sides with more than one row, {differ} hold runs whose TPOTs differ "
                  f"by more than {100 * REPEAT_DIFFERS:g} % (up to {100 * top:.1f} %, max/min), the others repeat one "
                  "measurement: run-to-run noise can exceed the sign test's ±1 % band.")]


def render(found: Found, oof: dict[str, list[PairCheck]], ins: list[PairCheck],
           checked: list[tuple[EpPair, float, float, str]]) -> str:
    """The docs/plan.md block, markers included."""
    head = oof[HEADLINE]
    s_full = summarise(FULL, [c for c, p in zip(head, found.pairs, strict=True) if p.full])
    s_all = summarise("all", head)
    lines = [
        BEGIN, *intro_lines(found), "",
        _wrap(f"Headline, leave one model out (the efficiency fit refitted without the pair's model, both rows "
              f"predicted by that fold, as data-build/validation_report.py): EP over all GPUs, the track's layout — "
              f"{s_full.rows} pairs, sign right {_pct(s_full.sign_hit_rate)}, gain MAPE {_pct(s_full.mape_end_to_end)}, "
              f"range coverage {_pct(s_full.coverage)}; all {s_all.rows} pairs — sign {_pct(s_all.sign_hit_rate)}, "
              f"MAPE {_pct(s_all.mape_end_to_end)}, coverage {_pct(s_all.coverage)}. Saying \"no change\" (gain 1) "
              f"scores {no_change(head)}."),
        "",
    ]
    names = {"leave_one_model_out": "**Leave one model out** (headline)",
             "leave_one_system_out": "Leave one system (GPU) out"}
    for g in GROUPINGS:
        lines += [f"{names[g]}; range from the {CASE_OF_GROUPING[g]} case:", "", *table(oof[g], found), ""]
    lines += [*in_sample_lines(found, ins), "", "Per box (leave one model out and in sample):", "",
              *by_box(found, head, ins), "", *plan_lines(checked), "", *caveat_lines(found), END]
    return "\n".join(lines)


def write(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    if BLOCK.search(text):
        text = BLOCK.sub(lambda _: block, text, count=1)
    elif LEDGER_END in text:
        text = text.replace(LEDGER_END, LEDGER_END + "\n\n" + block, 1)
    else:
        raise SystemExit(f"{path}: no {LEDGER_END!r} to put the block after")
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="print the block, write nothing")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    found, rows = load()
    ins_pred = in_sample(found, rows)
    ins = score(found, ins_pred)
    checked = plan_check([p for p in found.pairs if p.full], ins_pred)
    folds = out_of_fold(rows, a.workers)
    oof = {g: score(found, folds[g], CASE_OF_GROUPING[g]) for g in GROUPINGS}
    block = render(found, oof, ins, checked)
    print(block)
    for n, p in enumerate(found.pairs):  # per pair, for the report
        print(f"{p.kind[:6]} {p.name}: measured {ins[n].measured:.3f} in-sample {ins[n].prediction.gain:.3f} "
              + " ".join(f"{g} {oof[g][n].prediction.gain:.3f}" for g in GROUPINGS))
    if not a.dry_run:
        write(PLAN_MD, block)
        print(f"wrote {PLAN_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
