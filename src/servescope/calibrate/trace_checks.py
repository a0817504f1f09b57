"""Whether a trace and a scenario describe the same deployment, checked before a trace calibrates the scenario.

Does: refuse a trace of another GPU or GPU count (`check_trace`), a step that cannot be priced (mixed, a prefill
without tokens, a decode without a batch, a MoE trace for a dense model: `check_step`), and list the independent
model-mismatch evidence — all-reduce calls per step against the model's 2·layers + a few at TP > 1 (none at TP = 1)
(`check_collectives`), RMSNorm kernels per step against 2·layers + 1 and the hidden size the all-reduce message bytes
imply (`check_shape`) — refusing the trace when MODEL_MISMATCH_REFUSED of them agree (`refuse_another_model`).
Does not: fit anything (servescope.calibrate) or read files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from servescope.errors import PlanError, ServescopeError
from servescope.perfmodel import Scenario, StepPrediction
from servescope.specs.hardware import load_gpu

if TYPE_CHECKING:  # the trace's breakdown (Polars) is imported where a trace is calibrated
    from servescope.analysis.breakdown import StepBreakdown, TraceBreakdown

AR_CALL_TOLERANCE = 3  # all-reduce calls per step the trace may differ from the model by (≥ 10% of them)
HIDDEN_TOLERANCE = 0.05  # relative disagreement of the trace's implied hidden size with the config


def is_trace(b: TraceBreakdown | StepBreakdown) -> TypeGuard[TraceBreakdown]:
    from servescope.analysis.breakdown import TraceBreakdown

    return isinstance(b, TraceBreakdown)


def is_step(b: TraceBreakdown | StepBreakdown) -> TypeGuard[StepBreakdown]:
    from servescope.analysis.breakdown import StepBreakdown

    return isinstance(b, StepBreakdown)


def source_of(b: TraceBreakdown | StepBreakdown) -> str:
    if is_step(b):
        return f"step {b.index}"
    assert is_trace(b)
    return b.file


def check_trace(b: TraceBreakdown, sc: Scenario) -> None:
    if b.world_size and b.world_size != sc.n_gpus:
        raise PlanError(f"{b.file}: trace has world size {b.world_size} but the scenario uses {sc.n_gpus} GPUs "
                        f"(tp={sc.tp} dp={sc.dp} pp={sc.pp})")
    if b.device_name:
        try:
            gpu = load_gpu(b.device_name)
        except ServescopeError:
            return
        if gpu.name != sc.gpu.name:
            raise PlanError(f"{b.file}: trace ran on {b.device_name} but the scenario is for {sc.gpu.name}")


def check_step(s: StepBreakdown, sc: Scenario, warnings: list[str]) -> None:
    where = f"step {s.index} ({s.label[:40]})"
    if s.kind not in ("prefill", "decode"):
        raise PlanError(f"{where} is {s.kind}; calibrate on a pure prefill or decode step")
    if s.kind == "prefill" and not s.tokens:
        raise PlanError(f"{where} is a prefill without a token count; cannot price it")
    if s.kind == "decode" and not s.batch_size:
        raise PlanError(f"{where} is a decode step without a batch size; cannot price it")
    if s.kind == "decode" and s.tokens and s.batch_size and s.tokens % s.batch_size:
        raise PlanError(f"{where}: {s.tokens} tokens do not split evenly over {s.batch_size} sequences")
    devices = max(1, s.devices)
    moe_us = s.classes_us.get("moe", 0.0) / devices
    if not sc.model.is_moe and moe_us > 0.05 * s.gpu_busy_us / devices:
        raise PlanError(f"{where}: trace has {moe_us / 1e3:.2f} ms of MoE kernels but {sc.model.name} is dense")
    if sc.model.is_moe and moe_us == 0:
        warnings.append(f"{where}: no MoE kernels recognised in the trace for MoE model {sc.model.name}; "
                        "expert GEMMs may be classified as gemm")


MODEL_MISMATCH_REFUSED = 2  # independent checks that must agree before a trace is refused as another model


def refuse_another_model(b: TraceBreakdown | StepBreakdown, sc: Scenario, evidence: dict[str, str]) -> None:
    """Two or more independent checks (layers from all-reduce calls, layers from RMSNorm kernels, hidden size
    from all-reduce message bytes) saying the trace is not this model: PlanError with the evidence, in one line,
    as a trace of another GPU is refused. One alone stays a warning (a fused norm or an unusual engine can move
    one count)."""
    if len(evidence) < MODEL_MISMATCH_REFUSED:
        return
    found = "; ".join(evidence_of(w) for w in evidence.values())
    raise PlanError(f"{source_of(b)}: the trace is not {sc.model.name} ({len(evidence)} independent checks "
                    f"disagree: {found}); pass the model the trace ran (--model)")


def evidence_of(warning: str) -> str:
    """The measured part of a mismatch warning ("… imply ~36 layers, but M has 24"), without its advice."""
    return warning.split(": ", 1)[-1].split(": ", 1)[0]


def check_collectives(s: StepBreakdown, sc: Scenario, pred: StepPrediction) -> list[tuple[str, str]]:
    """All-reduces per step against the model's (2 per layer + a few at TP>1, none at TP=1). A trace with
    all-reduces where the model has none, or none where it has some, is another layout: PlanError. Both present
    but different counts: a warning (another model, e.g. fewer layers), with the layer count they imply."""
    measured = s.collectives.get("all_reduce")
    calls = measured.calls // max(1, s.devices) if measured else 0
    model = pred.collectives.get("all_reduce")
    expected = int(model.calls_per_step) if model is not None and sc.tp > 1 else 0
    if abs(calls - expected) <= max(AR_CALL_TOLERANCE, 0.1 * expected):
        return []
    if calls == 0 or expected == 0:
        raise PlanError(f"step {s.index}: {calls} all-reduce calls per step, but {sc.model.name} at TP={sc.tp} "
                        f"makes {expected} ({sc.model.n_layers} layers: 2 per layer + a few for TP>1, none at TP=1)")
    implied = (calls - (expected - 2 * sc.model.n_layers)) / 2
    return [("layers_allreduce",
             f"step {s.index}: {calls} all-reduce calls per step imply ~{implied:.0f} layers, but {sc.model.name} "
             f"has {sc.model.n_layers} ({expected} all-reduces at TP={sc.tp}): the trace is probably another model; "
             "the fitted efficiencies absorb the difference and mean little")]


def check_shape(s: StepBreakdown, sc: Scenario) -> list[tuple[str, str]]:
    """Layer count from RMSNorm kernels per step (2 per layer + the final norm in vLLM/SGLang) and hidden size
    from all-reduce message bytes (tokens on the rank × hidden × 2 B), each against the model config; each
    (check, warning)."""
    out: list[tuple[str, str]] = []
    layers = sc.model.n_layers
    norms = s.class_calls.get("norm", 0) / max(1, s.devices)
    implied = (norms - 1) / 2
    if norms and abs(implied - layers) > max(2.0, 0.1 * layers):
        out.append(("layers_norm", f"step {s.index}: {norms:.0f} RMSNorm kernels per step imply ~{implied:.0f} "
                    f"layers (2 per layer + 1), but {sc.model.name} has {layers}: check that the trace is this model"))
    ar = s.collectives.get("all_reduce")
    tokens = s.tokens or s.batch_size
    if ar is not None and ar.sized_calls and ar.message_bytes_median and tokens:
        hidden = ar.message_bytes_median / (tokens * 2.0)
        if abs(hidden / sc.model.hidden_size - 1.0) > HIDDEN_TOLERANCE:
            out.append(("hidden_size", f"step {s.index}: all-reduce messages of {ar.message_bytes_median:.0f} B over "
                        f"{tokens} tokens imply hidden size {hidden:.0f} (bf16), but {sc.model.name} has "
                        f"{sc.model.hidden_size}"))
    return out
