"""docs/plan.md's ep-dev-pairs block — the `expert_parallel` track held against the dev CSV's EP-on/EP-off pairs — is
what data-build/ep_dev_pairs.py writes today, as far as a fast test can recompute it.

The block's headline is out of fold: leave-one-model-out and leave-one-system-out refits of the efficiency fit
(validation.crossval), about a minute on two cores — too slow for the suite, and nothing is cached for the test. So
this test recomputes everything that needs no cross-validation: the pairs (the matching rule, checked here against a
plain scan of the CSV), the intro with its counts, the in-sample table (the shipped constants: the plan's own
numbers and ranges), the per-box measured and in-sample columns and the caveat's counts; the plan's track is priced on
one pair per box and must give the model's ratio; the out-of-fold parts are checked for structure (their pair counts)
and against themselves (the headline sentence restates the leave-one-model-out table). A pricing or fit change fails
it through the in-sample part: rerun `python data-build/ep_dev_pairs.py` — never edit the block by hand.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bench_scripts import bench_script

ep = bench_script("ep_dev_pairs")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    found, rows = ep.load()
    pred = ep.in_sample(found, rows)
    return found, rows, pred, ep.score(found, pred)


@pytest.fixture(scope="module")
def block() -> str:
    found = ep.BLOCK.findall((ROOT / "docs" / "plan.md").read_text(encoding="utf-8"))
    assert len(found) == 1, "docs/plan.md needs exactly one ep-dev-pairs block"
    return str(found[0])


def test_the_block_follows_the_ledger_block_in_its_section() -> None:
    text = (ROOT / "docs" / "plan.md").read_text(encoding="utf-8")
    head = text.index("\n## Checked against measured pairs\n")
    at = text.index(ep.BEGIN)
    assert text.index(ep.LEDGER_END) + len(ep.LEDGER_END) + 2 == at  # right after the ledger block, one blank line
    assert head < at < text.index(ep.END) < text.find("\n## ", head + 1)


def test_the_parts_without_cross_validation_equal_the_render(loaded, block) -> None:  # type: ignore[no-untyped-def]
    found, _, _, ins = loaded
    for part in (ep.intro_lines(found), ep.in_sample_lines(found, ins), ep.caveat_lines(found)):
        assert "\n".join(part) in block, "stale: run python data-build/ep_dev_pairs.py"
    # the per-box table: every column but the out-of-fold one recomputed (by_box with the in-sample checks twice)
    def cells(lines: list[str]) -> list[list[str]]:
        return [line.split(" | ") for line in lines if line.startswith("| ") and line.count(" | ") == 5]

    want, got = cells(ep.by_box(found, ins, ins)), cells(block.splitlines())
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        assert [g[i] for i in (0, 1, 2, 4)] == [w[i] for i in (0, 1, 2, 4)], "stale: run data-build/ep_dev_pairs.py"
    assert len(found.pairs) >= 40 and {p.kind for p in found.pairs} == {ep.FULL, ep.HYBRID}


def test_the_out_of_fold_tables_count_the_same_pairs(loaded, block) -> None:  # type: ignore[no-untyped-def]
    found = loaded[0]
    n_full = sum(p.full for p in found.pairs)
    for name, n in ((ep.FULL, n_full), (ep.HYBRID, len(found.pairs) - n_full), ("all", len(found.pairs))):
        assert block.count(f"| {name} | {n} | ") == 1 + len(ep.GROUPINGS)  # each fold's table and the in-sample one
    # the headline restates the leave-one-model-out table's rows
    table = block[block.index("**Leave one model out**"):].split("\n\n")[1]  # the paragraph after its title
    rows = {r.split(" | ")[0][2:]: r.split(" | ") for r in table.splitlines() if r.startswith("| ")}
    text = " ".join(block[block.index("Headline"):block.index("**Leave one model out**")].split())
    full, every = rows[ep.FULL], rows["all"]
    assert (f"{n_full} pairs, sign right {full[4]}, gain MAPE {full[5]}, range coverage {full[6].rstrip(' |')}"
            in text)
    assert f"all {len(found.pairs)} pairs — sign {every[4]}, MAPE {every[5]}, coverage {every[6].rstrip(' |')}" in text


def test_the_plan_track_gives_the_models_in_sample_ratio(loaded, block) -> None:  # type: ignore[no-untyped-def]
    """The scored number is the plan's: its expert_parallel track, priced on one EP-over-all-GPUs pair per box."""
    found, _, pred, _ = loaded
    one = list({p.box: p for p in reversed(found.pairs) if p.full}.values())
    checked = ep.plan_check(one, pred)
    assert len(checked) >= 4
    for p, plan_gain, model_gain, _best in checked:
        assert plan_gain == pytest.approx(model_gain, rel=ep.PLAN_TOL), p.name
        assert p.before.scenario.ep == 1 and p.after.scenario.ep == p.before.scenario.tp * p.before.scenario.dp
    n_full = sum(p.full for p in found.pairs)
    assert f"on all {n_full} EP-over-all-GPUs pairs" in " ".join(block.split())
    assert f"within {ep.PLAN_TOL:g} relative" in " ".join(block.split())


def _records() -> list[dict[str, str]]:
    with ep.DEV.open(newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


def test_the_pairs_are_every_row_pair_that_differs_only_in_the_expert_layout(loaded) -> None:  # type: ignore[no-untyped-def]
    """A plain scan of the CSV, row against row (bucketed by model and system only), finds the same row pairs."""
    found, rows, _, _ = loaded
    by_id = {r.id: r for r in rows}
    skip = set(ep.NOT_SETTINGS) | set(ep.EXPERT_COLUMNS)
    buckets: dict[tuple[str, str], list[dict[str, str]]] = {}
    for rec in _records():
        r = by_id.get(rec["id"])
        if r is not None and r.scenario is not None:
            buckets.setdefault((rec["model_path"], rec["system"]), []).append(rec)
    scan = set()
    for recs in buckets.values():
        for a in recs:
            if float(a["moe_ep_size"] or 1) != 1:
                continue
            for b in recs:
                if (float(b["moe_ep_size"] or 1) > 1
                        and all((a[c] or "") == (b[c] or "") for c in a if c not in skip)
                        and by_id[a["id"]].concurrency == by_id[b["id"]].concurrency
                        and float(a["moe_tp_size"]) * float(a["moe_ep_size"] or 1)
                        == float(b["moe_tp_size"]) * float(b["moe_ep_size"])):
                    scan.add((a["id"], b["id"]))
    mine = {(i, j) for p in found.pairs for i in p.before.ids for j in p.after.ids}
    assert mine == scan and len(scan) >= len(found.pairs)


def test_a_row_that_differs_in_anything_else_is_not_paired(loaded) -> None:  # type: ignore[no-untyped-def]
    found, rows, _, _ = loaded
    p = next(x for x in found.pairs if len(x.after.ids) == 1 and x.full)
    target = p.after.ids[0]
    for column, value in (("backend_version", "0.0.1"), ("moe_tp_size", "2"), ("isl", "4096")):
        recs = [dict(r, **{column: value}) if r["id"] == target else r for r in _records()]
        again = ep.find_pairs(recs, rows)
        assert p.name not in {x.name for x in again.pairs}, column
        assert len(again.pairs) == len(found.pairs) - 1


def test_each_pair_is_scored_by_the_ledger_rules_and_the_plans_range(loaded) -> None:  # type: ignore[no-untyped-def]
    from servescope.perfmodel.ranges import change_bounds
    from servescope.validation.pairs import NEUTRAL

    found, _, pred, ins = loaded
    q10, q90, _ = change_bounds("system_seen")  # the b200 / b300 rows' case
    side = lambda g: 0 if abs(g - 1) <= NEUTRAL + 1e-9 else (1 if g > 1 else -1)  # noqa: E731
    for p, c in zip(found.pairs, ins, strict=True):
        g = (sum(pred[i] for i in p.before.ids) / len(p.before.ids)) / (sum(pred[i] for i in p.after.ids)
                                                                          / len(p.after.ids))
        m = (sum(found.tpot_ms[i] for i in p.before.ids) / len(p.before.ids)) / (
            sum(found.tpot_ms[i] for i in p.after.ids) / len(p.after.ids))
        assert c.prediction.gain == pytest.approx(g, rel=1e-12) and c.measured == pytest.approx(m, rel=1e-12)
        assert c.sign_right == (side(g) == side(m))
        assert c.error == pytest.approx(abs(g - m) / m)
        assert c.in_range == (g / q90 <= m <= g / q10)
