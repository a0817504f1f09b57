"""Step labels as vLLM, SGLang, ATOM and PyTorch write them (strings copied from the real traces in
tests/data/traces and from TraceLens annotation_utils.py; expected values read off the label by hand)."""

from __future__ import annotations

import pytest

from servescope.analysis.steps import StepLabel, parse_step_label


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        # tracelens/b200/eager_trace.json.gz: 1 context request of 888 tokens (888² = 788544 = Σ sq·sk)
        ("execute_context_1(888_788544)_generation_0(0)", StepLabel("prefill", 1, 888, "vllm")),
        # upstream plain form (vllm PR #22496)
        ("execute_context_0(0)_generation_32(32)", StepLabel("decode", 32, 32, "vllm")),
        # detailed forms in tracelens/inference/*: (Σ sq, Σ sk, Σ sq², Σ sq·sk), context + generation summed by hand
        ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)",
         StepLabel("decode", 32, 32, "vllm", (32, 55086, 32, 55086))),
        ("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
         StepLabel("mixed", 46, 8192, "vllm", (8192, 42919, 7475822, 7705799))),
        ("step[EXTEND bs=15 toks=15360]", StepLabel("prefill", 15, 15360, "sglang")),
        ("step[DECODE bs=64]", StepLabel("decode", 64, 64, "sglang")),
        ("step[MIXED bs=2]", StepLabel("mixed", 2, None, "sglang")),
        ("prefill[bs=4 tok=4096 ctx=[1024, 1024, 1024, 1024]]", StepLabel("prefill", 4, 4096, "atom")),
        ("decode[bs=117/128 tok=117 d=3]", StepLabel("decode", 117, 117, "atom")),
        ("ProfilerStep#551", StepLabel("unknown", None, None, "profiler_step")),
    ],
)
def test_parse_step_label(label: str, expected: StepLabel) -> None:
    assert parse_step_label(label) == expected


@pytest.mark.parametrize("name", ["aten::mm", "execute_model", "vllm::all_reduce", "step", "capture_32_decode"])
def test_non_step_labels(name: str) -> None:
    assert parse_step_label(name) is None
