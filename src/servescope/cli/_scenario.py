"""The scenario options every modelling command shares (--model, --gpu, the layout, quantization, engine version
and defaults, routing, decode-only) and the Scenario they build; notes on how names were read go through
cli._app.note. Thin: the library resolves names and checks layouts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from servescope.cli._app import F, InputOption, note
from servescope.specs.engines import DEFAULT_ENGINE, ENGINES, value_since

if TYPE_CHECKING:
    from servescope.perfmodel import Scenario


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or any(not x.strip() for x in text.split(",")):
        raise click.BadParameter(f"expected positive integers, got {text!r}")
    return values


def scenario_options(fn: F) -> F:
    """Options shared by `model` and `plan`: the scenario (--model and --gpu required)."""
    return _scenario_options(fn, required=True)


def optional_scenario_options(fn: F) -> F:
    """The scenario options with --model and --gpu optional (`report`: both add the model, neither the trace only)."""
    return _scenario_options(fn, required=False)


def _scenario_options(fn: F, required: bool) -> F:
    # No `default` on a required option: Click >= 8.3 counts an explicit default=None as a value and no longer
    # reports the option missing (`servescope model` alone reached the model loader with None).
    optional: dict[str, Any] = {} if required else {"default": None}
    options = [
        click.option("--model", "model_name", cls=InputOption, required=required, **optional,
                     help="Bundled name, Hugging Face id or config.json path."),
        click.option("--gpu", required=required, **optional, help="GPU name (see `servescope specs list`)."),
        click.option("--tp", default=1, show_default=True, help="Tensor parallel degree."),
        click.option("--ep", default=1, show_default=True, help="Expert parallel degree (MoE)."),
        click.option("--pp", default=1, show_default=True, help="Pipeline parallel degree."),
        click.option("--dp", default=1, show_default=True, help="Data / attention-DP degree."),
        click.option("--quant", default="native", show_default=True,
                     help="Weights: native (the checkpoint's own), bf16, fp8, fp8-block, int4-w4a16, nvfp4, mxfp4."),
        click.option("--moe-quant", default=None, help="Routed experts' scheme, if different."),
        click.option("--kv-quant", default=None, help="KV-cache format: the engine's --kv-cache-dtype (vLLM auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16; SGLang auto, fp8_e4m3, fp8_e5m2, bf16, fp4_e2m1) or a scheme (bf16, fp8); default (auto): what the backend allocates for the checkpoint (specs/kv_dtypes.py)."),
        click.option("--cuda-graphs/--no-cuda-graphs", default=True, show_default=True),
        click.option("--overlap-scheduler/--no-overlap-scheduler", "overlap_scheduler", default=None,
                     help="The engine prepares the next step on the CPU while the GPU runs this one (vLLM async "
                          "scheduling); default: what the engine version does (vLLM from "
                          f"{value_since('vllm', 'overlap', 'enabled').removesuffix('.0')}, SGLang, TRT-LLM on)."),
        click.option("--engine-version", default="", metavar="VERSION",
                     help="Engine release whose defaults are priced (e.g. 0.16.0); default: the newest in the data. "
                          "A local label names the build, not the release: +pcie-ar (0.24.0+pcie-ar, or +pcie-ar "
                          "for the newest) a vLLM build that allows custom all-reduce on >2 PCIe GPUs, +pcie-ar-cpp "
                          "the community fork's one-shot."),
        click.option("--pcie-topology", default=None, metavar="PRESET",
                     help="The box's PCIe switches (specs/data/pcie_topology.toml: switch-2x4, switch-4x2, "
                          "switch-1x8, direct-2socket, direct-4); default: switch-2x4. Prices custom all-reduce."),
        click.option("--topology", "topology_file", default=None, metavar="FILE",
                     help="The box's PCIe topology read from `nvidia-smi topo -m` output (instead of a preset)."),
        click.option("--gpu-memory-utilization", type=click.FloatRange(0.0, 1.0, min_open=True), default=None,
                     help="Share of GPU memory the engine may use; default: the engine version's (vLLM 0.9)."),
        click.option("--routing", default="skewed", show_default=True, metavar="skewed|uniform|FILE",
                     help="How routed tokens spread over experts: skewed (published power-law loads), uniform, or "
                          "a measured expert-count histogram (JSON list or one count per line)."),
        click.option("--moe-curve", is_flag=True, default=False,
                     help="Price routed experts at aiconfigurator's measured per-op curve where one answers inside "
                          "its domain (the default since issue 27, per domain: bench/RESULTS.md; kept for scripts)."),
        click.option("--op-curves", "op_curves", type=click.Choice(["on", "off", "transfer"]), default="on",
                     show_default=True,
                     help="Dense GEMMs, attention and routed experts at aiconfigurator's measured per-op curves of the GPU, engine "
                          "and engine version where one answers inside its domain (on); off: datasheet roofline × "
                          "fitted efficiency everywhere; transfer: also another engine's table or the nearest "
                          "measured version where none answers (said in the provenance)."),
        click.option("--no-op-curves", "no_op_curves", is_flag=True, default=False,
                     help="Same as --op-curves off."),
        click.option("--decode-only", is_flag=True, default=False,
                     help="Price a decode-only run: context fixed at --isl, no prompts in the steps."),
        click.option("--backend", default=DEFAULT_ENGINE, show_default=True,
                     type=click.Choice(list(ENGINES), case_sensitive=False)),
        click.option("--interconnect", default=None, help="Override the GPU's link (e.g. pcie)."),
        click.option("--isl", default=1024, show_default=True, help="Input (prompt) length, tokens."),
        click.option("--osl", default=512, show_default=True, help="Output length, tokens."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _gpu_choice(name: str) -> str | None:
    from servescope.errors import UnknownName
    from servescope.specs.hardware import gpu_choice_note

    try:
        return gpu_choice_note(name)
    except UnknownName:  # Scenario.build says it, with the known names
        return None


def _scenario(kw: dict[str, Any]) -> Scenario:
    from servescope.perfmodel import Scenario
    from servescope.specs.quant import alias_note

    for option, value in (("--quant", kw["quant"]), ("--moe-quant", kw["moe_quant"])):
        if (said := alias_note(value)) is not None:
            note(f"{option} {value} is read as {said}")
    if isinstance(kw["gpu"], str) and (choice := _gpu_choice(kw["gpu"])) is not None:
        note(f"--gpu {kw['gpu']} is read as {choice}")
    from servescope.specs.kv_dtypes import kv_scheme

    kv = kv_scheme(kw["kv_quant"])  # an engine's --kv-cache-dtype value, or a scheme name
    sc = Scenario.build(
        model=kw["model_name"], gpu=kw["gpu"], tp=kw["tp"], ep=kw["ep"], pp=kw["pp"], dp=kw["dp"],
        quant=kw["quant"], moe_quant=kw["moe_quant"], kv_quant=kv, cuda_graphs=kw["cuda_graphs"],
        isl=kw["isl"], osl=kw["osl"], backend=kw["backend"].lower(), interconnect=kw["interconnect"],
        engine_version=kw.get("engine_version") or "", gpu_memory_utilization=kw.get("gpu_memory_utilization"),
        pcie_topology=_topology(kw),
    )
    if sc.engine.note:  # the defaults used are printed with the result (provenance); an odd version is a warning
        note("warning: " + sc.engine.note)
    changes: dict[str, Any] = {}
    if kw.get("overlap_scheduler") is not None:
        changes["overlap_scheduler"] = bool(kw["overlap_scheduler"])
    if kw.get("decode_only"):
        changes["decode_only"] = True
    curves = {"moe_curve": 1.0} if kw.get("moe_curve") else {}
    mode = "off" if kw.get("no_op_curves") or kw.get("op_curves") is False else kw.get("op_curves")
    if mode in ("off", "transfer"):
        curves["op_curves"] = 0.0 if mode == "off" else 2.0
    if curves:
        changes["efficiency"] = sc.efficiency.scaled(**curves)
    if (routing := _routing(kw.get("routing") or "skewed", sc)) is not None:
        changes["routing"] = routing
    return sc.with_(**changes) if changes else sc


def _topology(kw: dict[str, Any]) -> Any:
    """--pcie-topology PRESET or --topology FILE (a Path: Scenario.build reads it), not both."""
    from pathlib import Path

    preset, path = kw.get("pcie_topology"), kw.get("topology_file")
    if preset and path:
        raise click.BadParameter("give a preset or a file, not both", param_hint="--pcie-topology/--topology")
    return Path(path) if path else preset


def _routing(text: str, sc: Scenario) -> Any:
    """The --routing value as a perfmodel Routing (None: the default, skewed)."""
    from servescope.perfmodel.routing import Routing
    from servescope.specs.routing_file import read_expert_histogram

    if text == "skewed":
        return None
    if text == "uniform":
        return Routing("uniform")
    if not sc.model.n_routed_experts:
        raise click.BadParameter(f"{sc.model.name} has no routed experts", param_hint="--routing")
    return Routing("measured", read_expert_histogram(text, sc.model.n_routed_experts), text)

