"""One answer per layout (issue 28, item 3): `plan`'s expert_parallel track, `model` (perfmodel.predict) and `sweep`
price an EP layout at a given batch the same way — the planner adds no imbalance of its own (perfmodel.ep_balance
prices the busiest GPU's experts for all three)."""

from __future__ import annotations

import pytest

from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.serving import predict
from servescope.planner.layouts import Layout
from servescope.planner.plan import plan
from servescope.planner.sweep import sweep

# (model, GPU, moe_quant): a PCIe box (RTX PRO 6000 server, Kimi-K2.5 int4 experts) and an NVLink one (H200 SXM)
CASES = [("kimi-k2.5", "rtx_pro_6000_server", "int4-w4a16"), ("deepseek-v3", "h200_sxm", None)]


def _layout_of(name: str, tp: int) -> Layout:
    """The track's layout name -> the enumerator's layout of 8 GPUs with EP over all of them."""
    if name == "EP with TP attention":
        return Layout(tp, 8, 8 // tp)
    attn = name.removeprefix("EP with attention TP")
    t, dp = (int(x) for x in attn.split("×DP"))
    return Layout(t, 8, dp)


@pytest.mark.parametrize(("model", "gpu", "moe_quant"), CASES)
@pytest.mark.parametrize("concurrency", [1, 64])
def test_plan_gain_is_the_models_tpot_ratio(model: str, gpu: str, moe_quant: str | None, concurrency: int) -> None:
    base = Scenario.build(model, gpu, tp=8, moe_quant=moe_quant)
    track = plan(base, "tpot", concurrency=concurrency).track("expert_parallel")
    options = track.details["options"]
    assert "EP with TP attention" in options and len(options) >= 2  # both kinds of layout were priced
    tpot_base = predict(base, [concurrency])[0].tpot_s
    sw = {(p.layout, p.concurrency): p for p in sweep(base, 8, [concurrency], moe=True).points}
    for name, gain in options.items():
        lay = _layout_of(name, 8)
        sc = base.with_(tp=lay.tp, ep=lay.ep, dp=lay.dp)
        tpot = predict(sc, [concurrency])[0].tpot_s
        assert gain == pytest.approx(tpot_base / tpot, rel=1e-6), name
        assert sw[(lay, concurrency)].tpot_s == pytest.approx(tpot, rel=1e-9), name  # the sweep's row is model's
    assert track.gain == pytest.approx(max(options.values()), rel=1e-12)


def test_ep_at_batch_one_loses_on_whole_experts() -> None:
    """At c1 top-8 of 256 experts on 8 GPUs puts ~2.6 whole experts on the busiest GPU where TP8 reads one
    expert's worth per GPU: EP with TP attention costs more than TP alone (model and plan alike, gain < 1)."""
    base = Scenario.build("deepseek-v3", "h200_sxm", tp=8)
    track = plan(base, "tpot", concurrency=1).track("expert_parallel")
    assert track.details["options"]["EP with TP attention"] < 1.0
    assert track.why_not is not None and "busiest GPU" in track.why_not
