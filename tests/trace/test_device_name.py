"""The GPU a trace ran on, from what the file carries (trace.types.Trace.device_info), as `trace` prints it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from independent import DATA, gpu_events
from servescope.analysis.breakdown import breakdown
from servescope.cli import main
from servescope.trace import DeviceInfo, Trace, load_trace

TRITON = DATA / "traces" / "tracelens" / "torch_compile_triton" / "trace.json.gz"  # ROCm: lists device 0 only
UNNAMED = DATA / "traces" / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"


def _doc(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def test_kernels_on_a_device_the_properties_do_not_list_take_the_listed_model() -> None:
    doc = _doc(TRITON)
    listed = {p["id"]: p["name"] for p in doc["deviceProperties"]}
    ran_on = {e["args"]["device"] for e in gpu_events(doc["traceEvents"])}
    assert listed == {0: "AMD Instinct MI300X"} and ran_on == {2}  # the case: the GPU was "GPU ?" before
    b = breakdown(load_trace(TRITON))
    assert b.device_name == "AMD Instinct MI300X" and b.num_sms == doc["deviceProperties"][0]["numSms"]
    out = CliRunner().invoke(main, ["trace", str(TRITON)], env={"COLUMNS": "200"}).output
    assert "· AMD Instinct MI300X (304 SMs)" in out and "GPU ?" not in out


def test_a_trace_whose_properties_name_no_gpu_says_so() -> None:
    props = _doc(UNNAMED)["deviceProperties"]
    assert {p["name"] for p in props} == {""} and {p["numSms"] for p in props} == {304}
    out = CliRunner().invoke(main, ["trace", str(UNNAMED)], env={"COLUMNS": "200"}).output
    assert "GPU not named in the trace (304 SMs)" in out and "GPU ?" not in out


def _trace(devices: dict[int, DeviceInfo]) -> Trace:
    return Trace(Path("t.json"), 0, 1, pl.DataFrame({"kind": ["kernel"]}), devices)


def test_device_info_never_guesses_between_models() -> None:
    h100, a100 = DeviceInfo(0, "NVIDIA H100", 132, 2048), DeviceInfo(1, "NVIDIA A100", 108, 2048)
    assert _trace({0: h100}).device_info(0) is h100
    assert _trace({0: h100}).device_info(5) == DeviceInfo(5, "NVIDIA H100", 132, 2048)
    assert _trace({0: h100, 1: a100}).device_info(5) is None  # two models: which one ran is unknown
    assert _trace({0: h100, 1: a100}).device_info(1) is a100  # its own entry always wins
    unnamed = DeviceInfo(3, "", 132, None)
    assert _trace({0: h100, 3: unnamed}).device_info(3) == DeviceInfo(3, "NVIDIA H100", 132, 2048)
    assert _trace({3: unnamed}).device_info(3) is unnamed  # nothing names it: SMs only
