"""The `model` text's one line on where each kernel class's time comes from (measured curve or datasheet, and why)."""

from __future__ import annotations

from servescope.perfmodel import Scenario
from servescope.perfmodel.ranges import provenance
from servescope.report.model_text import _kernel_sources


def test_a_gpu_without_curves_is_said_to_be_datasheet() -> None:
    line = _kernel_sources(provenance(Scenario.build("llama-3.1-70b", "a100_sxm", tp=4, check_memory=False)))
    assert line.startswith("kernels: no measured curve; datasheet for dense GEMMs (no curves for this GPU)")


def test_curves_and_their_refusals_are_named() -> None:
    kimi = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16")
    # vLLM has no MLA kernel table and no other engine's stands in (issue 27); its Marlin expert curve answers
    assert _kernel_sources(provenance(kimi)) == ("kernels: measured curves for dense GEMMs, routed experts; "
                                                 "datasheet for decode attention (no curve for this case)")
    old = Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, moe_quant="int4-w4a16", engine_version="0.16.0")
    assert "dense GEMMs (outside the curve's engine versions)" in _kernel_sources(provenance(old))
    r1 = Scenario.build("deepseek-r1", "b200_sxm", tp=8, check_memory=False, backend="sglang")
    assert "dense GEMMs (part)" in _kernel_sources(provenance(r1))  # SGLang's small fp8-block GEMMs: refused
    vllm = Scenario.build("deepseek-r1", "b200_sxm", tp=8, check_memory=False)
    assert "dense GEMMs (off in this domain by its dev rows)" in _kernel_sources(provenance(vllm))
    off = kimi.with_(efficiency=kimi.efficiency.scaled(op_curves=0.0))
    assert "dense GEMMs (--no-op-curves)" in _kernel_sources(provenance(off))
