"""Tracks found applied from what changed between two traces (analysis.engine_facts → planner.applied), and
verify's use of them.

The synthetic traces are written here (Kineto JSON: decode steps, launches, kernels by name), the expected evidence
written out from them; the shared HTA pair is verified end to end in tests/cli/test_cli_verify.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from servescope.advise import calibration_rank
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.engine_facts import EngineFacts, engine_facts
from servescope.errors import PlanError
from servescope.planner.applied import found_changes
from servescope.planner.verify import Measured, PlannedTrack, PlanPrediction, verify

NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
CUSTOM_AR = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*)"
BF16_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
FP8_GEMM = "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128"


def _kineto(path: Path, kernels: list[str], graphs: bool = False, steps: int = 3) -> Path:
    """SGLang-labelled decode steps; eager: one cudaLaunchKernel per kernel, graphs: one cudaGraphLaunch per step."""
    ev: list[dict[str, Any]] = []
    t, corr = 0.0, 1
    for _ in range(steps):
        start, kt = t, t + 10
        if graphs:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": t + 1,
                       "dur": 5, "args": {"correlation": corr}})
        for name in kernels:
            if not graphs:
                ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t + 1, "dur": 3, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": kt, "dur": 20.0,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
            kt, t = kt + 21, t + 4
            corr += 0 if graphs else 1
        corr += 1
        end = max(t, kt) + 5
        ev.append({"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=4]", "pid": 1, "tid": 1,
                   "ts": start, "dur": end - start, "args": {}})
        t = end + 50
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev,
                                "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}]}))
    return path


def _facts(path: Path) -> EngineFacts:
    a = analyze_trace(path)
    return engine_facts(a.ranks, calibration_rank(a), a.path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[EngineFacts, EngineFacts]:
    d = tmp_path_factory.mktemp("applied")
    before = _kineto(d / "before.json", [NCCL_AR, BF16_GEMM, NORM, NORM] * 4)
    after = _kineto(d / "after.json", [CUSTOM_AR, FP8_GEMM, NORM] * 4 + ["rejection_greedy_sample_kernel"],
                    graphs=True)
    return _facts(before), _facts(after)


def test_each_change_of_an_engine_names_its_track(pair: tuple[EngineFacts, EngineFacts]) -> None:
    before, after = pair
    found, reverse = found_changes(before, after)
    got = {f.kind: f.evidence for f in found}
    assert list(got) == ["cuda_graphs", "speculative_decoding", "custom_allreduce", "collective_fusion",
                         "quantization"] and reverse == ()
    # written out from the traces above: 16 eager launches per step → one graph launch; 13 kernels
    assert got["cuda_graphs"] == ("graph launches 0.0 → 1.0 per step, launch calls 16 → 1 per step (kernels 16 → "
                                  "13)")
    assert got["speculative_decoding"] == "drafter / verify kernels appeared: rejection_greedy_sample_kernel"
    assert got["custom_allreduce"] == ("all-reduce kernels NCCL 100% (ncclDevKernel_AllReduce_Sum_bf16_RING_LL) → "
                                       "custom one-shot 100% (cross_device_reduce_1stage)")
    assert got["collective_fusion"].startswith("norm kernels 8 → 4 per step")
    assert got["quantization"] == "GEMM time by dtype 16-bit 100% → fp8 100% (from kernel names)"
    # the other way round every change runs against its track: none is found, each is said
    back, against = found_changes(after, before)
    assert back == () and {f.kind for f in against} == set(got)


def _f(**kw: Any) -> EngineFacts:
    base = EngineFacts("t", "decode", 4, 1, None, None, 900.0, 0.0, 900.0, 120.0, None, ("all_reduce",),
                      {"NCCL": 10.0}, {"NCCL": "ncclDevKernel_AllReduce"}, {"16-bit": 100.0})
    return replace(base, **kw)


def test_what_is_not_a_change() -> None:
    assert found_changes(_f(), _f()) == ((), ())
    # launches fall with the kernels (a smaller model), not graphs; one-token steps stay one-token
    assert found_changes(_f(), _f(launches_per_step=100.0, kernels_per_step=100.0))[0] == ()
    # fewer norms without an all-reduce is not the all-reduce fusion; a dtype that holds < half is not a change
    assert found_changes(_f(allreduce_us={}), _f(allreduce_us={}, norm_calls_per_step=30.0))[0] == ()
    assert found_changes(_f(), _f(gemm_us={"16-bit": 60.0, "fp8": 40.0}))[0] == ()
    assert found_changes(_f(gemm_us={"?": 100.0}), _f(gemm_us={"fp8": 100.0}))[0] == ()  # before unknown


def test_layout_and_expert_parallel() -> None:
    found, _ = found_changes(_f(world_size=8), _f(world_size=4, collectives=("all_reduce", "all_to_all")))
    assert [(f.kind, f.evidence) for f in found] == [
        ("parallelism_change", "world size 8 → 4"),
        ("expert_parallel", "all-to-all collectives appeared (expert dispatch / combine)")]
    assert [f.kind for f in found_changes(_f(ranks=2), _f(ranks=4))[0]] == ["parallelism_change"]
    assert found_changes(_f(tokens_per_seq=1.0), _f(tokens_per_seq=2.4))[0][0].evidence.startswith(
        "decode steps carry 2.40 tokens per sequence")


def _plan() -> PlanPrediction:
    tracks = (PlannedTrack("cuda_graphs", None, None, None, "already on"),
              PlannedTrack("speculative_decoding", 1.5, 1.1, 2.0), PlannedTrack("custom_allreduce", 1.1, 1.0, 1.2),
              PlannedTrack("quantization", 1.3, 1.1, 1.5))
    return PlanPrediction("plan.json", "tpot", 1, tracks, ("speculative_decoding", "custom_allreduce"), 1.6, 0.01,
                          100.0, "cross_validated", (0.8, 1.25))


def test_verify_scores_what_it_found_and_says_the_rest(pair: tuple[EngineFacts, EngineFacts]) -> None:
    before = Measured(0.012, "before.json", "mean GPU span", "trace", facts=pair[0])
    after = Measured(0.008, "after.json", "mean GPU span", "trace", facts=pair[1])
    v = verify(_plan(), before, after)
    assert v.applied_from == "found" and v.applied == ("speculative_decoding", "custom_allreduce", "quantization")
    assert [f.kind for f in v.found] == list(v.applied) and v.check.basis == "product"
    assert v.check.gain == pytest.approx(1.5 * 1.1 * 1.3)
    assert any(w.startswith("found cuda_graphs (graph launches") and "not applicable (already on)" in w
               for w in v.warnings)
    assert any(w.startswith("found collective_fusion") and "has no such track" in w for w in v.warnings)
    with pytest.raises(PlanError, match=r"before.json → after.json: no applied track found to score: found "
                                        r"cuda_graphs .*--applied combined: the plan's choice, "
                                        r"speculative_decoding \+ custom_allreduce\)"):
        verify(_plan(), before, replace(after, facts=replace(pair[0], graph_launches_per_step=1.0)))
    with pytest.raises(PlanError, match="a benchmark result file measures the objective, not how the engine ran"):
        verify(_plan(), before, Measured(0.008, "b.json", "mean TPOT", "benchmark"))
