"""Compute, memory and layout tracks: `cuda_graphs`, `async_scheduling`, `quantization`, `pd_disaggregation`,
`parallelism_change` (`split_k_attention` has its own module, planner.split_k_track).

Does: express each as a scenario change the performance model prices:
  cuda_graphs        eager: max(GPU, host dispatch of every kernel) + per-kernel launch gap (perfmodel.graphs) →
                     graph replay gap (kernel_overhead_s).
  async_scheduling   vLLM --async-scheduling: the step's CPU time (scheduler, input preparation, sampling output)
                     is hidden behind the GPU's, step = max(GPU, CPU) instead of their sum (Scenario.overlaps_cpu).
  quantization       KV cache to FP8; 16-bit weights to FP8; routed experts to FP4 on Blackwell (precision-lowering,
                     can be forbidden); the best of these — or, given a change (Context.option: `kv=fp8`,
                     `weights=fp8`, `experts=nvfp4`, joined by "+"; a ledger row's `change`), that one option as
                     given, an FP8 KV cache on a GPU without FP8 conversion included (its software decode priced by
                     perfmodel.kv_dequant; not applicable where that cannot be priced).
  pd_disaggregation  decode no longer absorbs other requests' prefills (the perfmodel's interference term);
                     KV of isl tokens crosses the link once per request (TTFT, not TPOT): bytes per GPU /
                     link bandwidth per GPU (NVLink in an NVLink domain, else PCIe/NIC for NIXL/UCX).
  parallelism_change other TP×DP layouts of the same GPUs (and 2×TP for TPOT, with more GPUs), when they fit.
Does not: price accuracy loss of quantization, or prefill-pool sizing beyond the rate formula in whatif.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from servescope.errors import PlanError, ScenarioError, ServescopeError
from servescope.perfmodel.scenario import Scenario
from servescope.perfmodel.step import step_arrays
from servescope.planner.layouts import layouts
from servescope.planner.track import Context, Proposal, not_applicable
from servescope.planner.whatif import Change, WhatIf
from servescope.specs import quant as q
from servescope.specs.engines import value_since
from servescope.units import GIGA, MS_PER_S


def cuda_graphs_track(ctx: Context) -> Proposal:
    kind = "cuda_graphs"
    validate = ("drop --enforce-eager; vLLM -O '{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}'; a trace should show "
                "one cudaGraphLaunch per step and no idle gaps between kernels")
    if ctx.scenario.cuda_graphs:
        return not_applicable(kind, "already on: decode steps replay CUDA graphs", "config change", validate)

    change = Change.of({"cuda_graphs": True})
    pre = ("batch sizes covered by the captured graph sizes (--max-cudagraph-capture-size)",
           "GPU memory for the CUDA graph pool")
    return Proposal(kind, True, None, "config change", pre, validate, whatif=WhatIf(kind, scenario=change),
                    note=_eager_note(ctx))


def _eager_note(ctx: Context) -> str:
    """The eager decode step's host dispatch (perfmodel.graphs.eager_host_s) against its GPU time: which side sets
    the step, the one the graph replay removes."""
    from servescope.perfmodel.combine import combine_step
    from servescope.perfmodel.step import step_parts

    sc, b = ctx.scenario, ctx.concurrency
    p = step_parts(sc, b, sc.isl + sc.osl / 2.0, 1)
    host = float(np.ravel(p.host_dispatch_s)[0])
    a = combine_step(replace(p, host_dispatch_s=np.zeros_like(p.host_dispatch_s)), sc.efficiency)
    gpu = float(np.ravel(a["step"])[0] - np.ravel(a["cpu"])[0])
    side = "host-bound: the GPU waits on the CPU" if host > gpu else "GPU-bound: the dispatch hides behind the GPU"
    return (f"eager, the host issues each kernel one torch op at a time: {host * MS_PER_S:.2f} ms of dispatch "
            f"against {gpu * MS_PER_S:.2f} ms of GPU work per decode step at batch {b} ({side}); a graph replays "
            "them with one launch")


def async_scheduling_track(ctx: Context) -> Proposal:
    kind = "async_scheduling"
    validate = ("A/B the same load with and without vLLM --async-scheduling; TPOT should fall by about the step's "
                "CPU time, and a trace (servescope trace) should show the GPU idle between decode steps shrink")
    sc = ctx.scenario
    if sc.overlaps_cpu:
        why = "as set" if sc.overlap_scheduler is not None else f"the default of {sc.engine.label}"
        return not_applicable(kind, "already on: the engine prepares the next step on the CPU while the GPU runs "
                              f"this one ({why}; {sc.engine.overlap.sources.get('enabled', '')})",
                              "config change", validate)
    if sc.backend != "vllm":
        return not_applicable(kind, f"no async-scheduling switch known for backend {sc.backend!r}", "config change",
                              validate)

    change = Change.of({"overlap_scheduler": True})
    a = step_arrays(sc, ctx.concurrency, sc.isl + sc.osl / 2.0, 1)
    cpu_ms, step_ms = (float(np.ravel(a[k])[0]) * MS_PER_S for k in ("cpu_raw", "step"))
    note = (f"hides the decode step's {cpu_ms:.2f} ms of CPU time behind its {step_ms - cpu_ms:.2f} ms on the GPU "
            f"(at batch {ctx.concurrency}, context {sc.isl + sc.osl // 2})")
    pre = (f"vLLM >= {value_since('vllm', 'overlap', 'enabled').removesuffix('.0')} turns async scheduling on by "
           "default (specs/data/engines/vllm.toml); on older releases it is "
           "--async-scheduling (V1 engine, 0.10 on), and the features in use — speculative decoding, pipeline "
           "parallelism, structured output — must be supported with it in that version",
           _cpu_basis(ctx))
    return Proposal(kind, True, None, "config change", pre, validate, whatif=WhatIf(kind, scenario=change), note=note)


def _cpu_basis(ctx: Context) -> str:
    """Where the hidden CPU time comes from: measured between the trace's steps, or the global fit."""
    cal = ctx.calibration
    if cal is not None and cal.step_gap_s is not None:
        return (f"the gain is the CPU time measured between consecutive steps of the trace ({cal.step_gap_s * 1e3:.2f} "
                f"ms, median of {cal.step_gap_pairs}); a profiler recording stacks or shapes lengthens it")
    return ("the gain is the step's CPU time, a fitted number (cpu_overhead_s + cpu_overhead_per_seq_s · batch, "
            "docs/model.md §4) that also carries per-step costs the model does not explain: calibrate on a trace "
            "with consecutive steps of this engine or measure the A/B")


# A ledger row's (or a caller's) `change`: the parts it lowers, `part=scheme` joined by "+", each part once.
# part -> (schemes it may take, the option's name); the names are the parts of the best-of options' names.
QUANT_CHANGES: dict[str, tuple[tuple[str, ...], str]] = {
    "kv": (("fp8",), "KV cache to FP8"),
    "weights": (("fp8",), "16-bit weights to FP8"),
    "experts": (("nvfp4",), "routed experts to NVFP4"),
}
_WEIGHT_PARTS = ("attention", "dense_mlp", "shared_experts", "experts")


def parse_change(text: str) -> tuple[tuple[str, str], ...]:
    """`kv=fp8`, `weights=fp8`, `experts=nvfp4`, or several joined by "+" (`kv=fp8+weights=fp8`) → ((part, scheme),
    ...) in QUANT_CHANGES order; PlanError (one line) for an unknown part or scheme, a repeat, or nothing."""
    items: dict[str, str] = {}
    for raw in (x.strip() for x in text.split("+")):
        part, _, value = (y.strip().lower() for y in raw.partition("="))
        if part not in QUANT_CHANGES:
            raise PlanError(f"change {raw!r}: unknown part {part!r}; parts: {', '.join(QUANT_CHANGES)} "
                            "(e.g. kv=fp8, or kv=fp8+weights=fp8)")
        if value not in QUANT_CHANGES[part][0]:
            raise PlanError(f"change {raw!r}: {part} takes {', '.join(QUANT_CHANGES[part][0])}, not {value!r}")
        if part in items:
            raise PlanError(f"change {text!r}: {part} given twice")
        items[part] = value
    return tuple((k, items[k]) for k in QUANT_CHANGES if k in items)


def _part_changes(qc: Any, part: str, value: str) -> dict[str, Any]:
    """The QuantConfig fields one change part sets: kv; every 16-bit weight part; the routed experts."""
    if part == "kv":
        return {"kv": q.SCHEMES[value]} if qc.kv.bytes_per_param >= 2 else {}
    if part == "weights":
        return {p: q.SCHEMES[value] for p in _WEIGHT_PARTS if getattr(qc, p).bytes_per_param >= 2}
    return {"experts": q.SCHEMES[value]} if qc.experts.bytes_per_param > 0.6 else {}


def _quant_options(sc: Scenario) -> dict[str, Any]:
    """Lower-precision layouts the GPU has tensor-core paths for: KV → FP8, 16-bit weights → FP8, experts →
    NVFP4, and all of them together (named by its parts: "KV cache to FP8 + 16-bit weights to FP8 + ...")."""
    qc, flops = sc.quant, dict(sc.gpu.flops_per_s)
    gate = {"kv": flops.get("fp8", 0) > 0, "weights": flops.get("fp8", 0) > 0,
            "experts": sc.model.is_moe and flops.get("fp4", 0) > 0}
    steps: dict[str, dict[str, Any]] = {}
    for part, (schemes, name) in QUANT_CHANGES.items():
        changes = _part_changes(qc, part, schemes[0]) if gate[part] else {}
        if changes:
            steps[name] = changes
    out = {name: replace(qc, **changes) for name, changes in steps.items()}
    if len(steps) > 1:
        merged: dict[str, Any] = {}
        for changes in steps.values():  # later steps win (experts: NVFP4 over FP8)
            merged.update(changes)
        out[" + ".join(steps)] = replace(qc, **merged)  # the option is named by what it does
    return out


def _requested_option(sc: Scenario, text: str) -> tuple[str, Any, str]:
    """The one option a `change` names: (name, QuantConfig, note), priced as given whatever the best would be (an
    FP8 KV cache is storage: it needs no FP8 tensor cores). PlanError when a part has nothing to lower or the
    GPU's FP8 KV decode cannot be priced (perfmodel.kv_dequant)."""
    from servescope.perfmodel.kv_dequant import kv_dequant

    qc, merged, names, notes = sc.quant, {}, [], []
    for part, value in parse_change(text):
        changes = _part_changes(qc, part, value) if part != "experts" or sc.model.is_moe else {}
        if not changes:
            raise PlanError(f"change {part}={value}: nothing to lower ({qc.describe()})")
        merged.update(changes)
        names.append(QUANT_CHANGES[part][1])
    if "kv" in merged:
        dq = kv_dequant(sc.gpu, merged["kv"])
        if dq.s_per_element is None:
            raise PlanError(f"change kv: {dq.why}")
        notes.append(dq.why)
    return " + ".join(names), replace(qc, **merged), "; ".join(notes)


def quantization_track(ctx: Context) -> Proposal:
    kind = "quantization"
    validate = ("serve the lower-precision checkpoint or --kv-cache-dtype fp8; check accuracy on your tasks "
                "(lm-eval) before measuring TPOT")
    pre = ("accuracy validated on your workload (precision-lowering)",)
    if kind in ctx.forbid:
        return Proposal(kind, False, "forbidden (--forbid quantization): lowers precision", "config change", pre,
                        validate, precision_lowering=True)
    note = ""
    if ctx.option:  # one named option (a ledger row's `change`), not the best
        try:
            name, qc, note = _requested_option(ctx.scenario, ctx.option)
        except PlanError as exc:
            return Proposal(kind, False, str(exc), "config change", pre, validate, precision_lowering=True)
        options = {name: qc}
    else:
        options = _quant_options(ctx.scenario)
    if not options:
        return Proposal(kind, False, f"nothing left to lower: {ctx.scenario.quant.describe()}", "config change",
                        pre, validate, precision_lowering=True)
    best: tuple[float, str, WhatIf] | None = None
    for name, qc in options.items():
        whatif = WhatIf(kind, scenario=Change.of({"quant": qc}))
        try:
            gain = ctx.evaluator.gain(ctx.baseline, ctx.evaluator.objective_value((whatif,)))
        except ServescopeError:
            continue
        if best is None or gain > best[0]:
            best = (gain, name, whatif)
    if best is None:
        return Proposal(kind, False, "no lower-precision layout can be priced", "config change", pre, validate,
                        precision_lowering=True)
    details: dict[str, Any] = {"option": best[1]}
    if ctx.option:
        details["change"] = ctx.option
    return Proposal(kind, True, None, "config change", pre, validate, whatif=best[2], precision_lowering=True,
                    note=best[1] + (f" ({note})" if note else ""), details=details)


def pd_disaggregation_track(ctx: Context) -> Proposal:
    kind, sc = "pd_disaggregation", ctx.scenario
    from servescope.perfmodel import kv_bytes_per_seq

    link_bw = float(sc.gpu.nvlink_bw_bytes_per_s or 0.0) if ctx.link == "nvlink" else 0.0
    link_name = "NVLink" if link_bw else "PCIe (NIXL/UCX through the host link or NIC)"
    link_bw = link_bw or float(sc.gpu.pcie_bw_bytes_per_s)
    kv_bytes = kv_bytes_per_seq(sc, sc.isl)
    transfer_s = kv_bytes / link_bw
    validate = ("vLLM --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}' on "
                "separate prefill and decode instances; measure TPOT and TTFT (the transfer adds to TTFT)")
    pre = ("a separate prefill pool (the decode GPUs stay as they are)",
           f"KV transfer of {kv_bytes / GIGA * 1e3:.1f} MB per GPU per request over {link_name}: "
           f"{transfer_s * MS_PER_S:.2f} ms added to TTFT")
    interference = ctx.evaluator.interference_s(sc, ctx.baseline.concurrency)
    if interference <= 0:
        return Proposal(kind, True, f"does not pay at concurrency {ctx.baseline.concurrency}: no other request's "
                        "prefill interrupts decoding", "config change", pre, validate,
                        whatif=WhatIf(kind, no_prefill_interference=True),
                        details={"kv_transfer_s": transfer_s})
    return Proposal(kind, True, None, "config change", pre, validate,
                    whatif=WhatIf(kind, no_prefill_interference=True),
                    note=f"removes {interference * MS_PER_S:.2f} ms of prefill interference per output token",
                    details={"kv_transfer_s": transfer_s, "interference_s": interference})


def _layouts(ctx: Context) -> list[tuple[str, dict[str, int]]]:
    """The other layouts of the same GPUs (planner.layouts), keeping the scenario's EP choice (on all GPUs or
    off), and for TPOT one with twice the TP when it stays inside one NVLink domain."""
    sc = ctx.scenario
    n = int(sc.tp) * int(sc.dp)
    out = []
    for lay in layouts(n, moe=sc.ep > 1):
        if lay.tp == sc.tp or (lay.ep > 1) != (sc.ep > 1):
            continue
        out.append((f"TP{lay.tp}×DP{lay.dp}" + (f" EP{lay.ep}" if lay.ep > 1 else ""),
                    {"tp": lay.tp, "dp": lay.dp, "ep": lay.ep}))
    domain = int(sc.gpu.nvlink_domain_gpus) or 8
    if ctx.objective == "tpot" and 2 * sc.tp * sc.dp <= domain:
        tp = 2 * sc.tp
        out.append((f"TP{tp}×DP{sc.dp} ({tp * sc.dp - n} more GPUs)", {"tp": tp, "dp": sc.dp,
                                                                      "ep": tp * sc.dp if sc.ep > 1 else 1}))
    return out


def parallelism_change_track(ctx: Context) -> Proposal:
    kind = "parallelism_change"
    validate = "vLLM --tensor-parallel-size T --data-parallel-size D; compare TPOT and tok/s at the planned load"
    options: list[tuple[float, str, WhatIf]] = []
    reasons: list[str] = []
    for name, changes in _layouts(ctx):
        whatif = WhatIf(kind, scenario=Change.of(changes, check_fits=True), exclusive=("expert_parallel",))
        try:
            gain = ctx.evaluator.gain(ctx.baseline, ctx.evaluator.objective_value((whatif,)))
        except ScenarioError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        options.append((gain, name, whatif))
    if not options:
        why = "no other TP×DP layout of these GPUs fits" + (f" ({reasons[0]})" if reasons else "")
        return not_applicable(kind, why, "config change", validate)
    gain, name, whatif = max(options, key=lambda o: o[0])
    return Proposal(kind, True, None if gain > 1 else f"does not pay: best layout {name}", "config change",
                    (f"layout {name} fits in memory",), validate, whatif=whatif, note=name,
                    details={"layout": name, "options": {o[1]: o[0] for o in options}})
