"""The step model term by term (perfmodel/step_terms.py, step.py): the step's geometry against the formula worked by
hand and the class keys the prediction carries."""

from __future__ import annotations

import numpy as np
import pytest

from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import decode_step, prefill_step
from servescope.perfmodel.step_terms import step_shape
from servescope.perfmodel.step_types import HOST, KERNEL_OVERHEAD, STEP_CLASSES


@pytest.fixture(scope="module")
def llama() -> Scenario:
    return Scenario.build("llama-3.1-8b", "h100_sxm")


def test_geometry_of_a_prefill_chunk_and_a_verify_block(llama: Scenario) -> None:
    # 3 sequences, 4 tokens each, 100 cached: a prefill reads the KV of 100 + 4 tokens, its queries see on average
    # 100 + (1 + 2 + 3 + 4)/4 = 102.5; a verify block's last token is not yet in the cache: 103 and 101.5
    pf = step_shape(llama, 3, 100, 4, prefill=True)
    assert (float(pf.L_eff), float(pf.L_q), float(pf.t_rank), float(pf.t_logits)) == (104.0, 102.5, 12.0, 3.0)
    assert float(pf.graphed) == 0.0  # a prefill runs eagerly
    vf = step_shape(llama, 3, 100, 4, prefill=False)
    assert (float(vf.L_eff), float(vf.L_q), float(vf.t_logits)) == (103.0, 101.5, 12.0)


def test_the_busiest_attention_dp_rank_sets_the_batch() -> None:
    sc = Scenario.build("qwen3-30b-a3b", "h100_sxm", tp=1, dp=4, ep=4)
    s = step_shape(sc, np.array([1.0, 4.0, 5.0, 9.0]), 512, 1, prefill=False)
    assert s.b.tolist() == [1.0, 1.0, 2.0, 3.0]  # ⌈B/4⌉
    assert s.t_glob.tolist() == [1.0, 4.0, 5.0, 9.0]


def test_class_keys_name_what_they_hold(llama: Scenario) -> None:
    for p in (decode_step(llama, 8, 2048), prefill_step(llama, 2048)):
        assert tuple(p.class_time_s) == STEP_CLASSES
        assert p.class_time_s[HOST] > 0.0 and p.class_time_s[KERNEL_OVERHEAD] > 0.0
        assert sum(p.class_time_s.values()) == pytest.approx(p.step_time_s, rel=1e-12)
        # the overhead term is the kernel overhead plus the host time, nothing else
        assert p.terms_s["overhead"] == pytest.approx(p.class_time_s[KERNEL_OVERHEAD] + p.class_time_s[HOST])
