"""The model's packaged data files (specs/data/*.toml, ranges.json): one reader each, one error for a bad file.

Does: parse the data the model and the simulation are priced with — each engine's defaults by release
(engines/<engine>.toml; specs/engines.py checks and resolves them), measured per-op curves and overheads (gemm_efficiency.toml,
engine_overheads.toml, kernel_counts.toml, the silicon curves of opcurves/<system>.json), and the numbers fitted
or measured on validation data by the scripts of data-build/ (efficiency.toml, spec_host.toml, ranges.json) —
and hand them over as plain dicts. Every number in them carries its source in the file. `perfmodel/` and
`simulate/` open no file: they call these.
Does not: interpret the numbers (each consumer validates its own keys) or cache (consumers cache what they build).
Where: `DATA`, the package's data folder, a plain path (the package is installed as files: a wheel or a checkout);
every specs reader opens its files under it (importlib.resources costs a command ~7 ms of imports: issue 30).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from servescope.errors import BadConfig

DATA = Path(__file__).with_name("data")  # specs/data/


def read_toml(name: str) -> dict[str, Any]:
    """Parse specs/data/<name>; a file that does not parse raises BadConfig naming it."""
    path = DATA / name
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise BadConfig(f"specs/data/{name}: {e}") from None


def read_json(name: str) -> Any:
    """Parse specs/data/<name> as JSON; an unreadable or malformed file raises BadConfig naming it."""
    import msgspec  # its C decoder: a 0.6 MB op-curve file in ~6 ms, json's ~15 ms (issue 30); the trace loads it

    path = DATA / name
    try:
        return msgspec.json.decode(path.read_bytes())
    except (OSError, ValueError) as e:  # msgspec.DecodeError is a ValueError
        raise BadConfig(f"specs/data/{name}: {e}") from None


def efficiency() -> dict[str, Any]:
    """The global fitted efficiency constants (data-build/fit_efficiency.py)."""
    return read_toml("efficiency.toml")


def engine_overheads() -> dict[str, Any]:
    """Per-kernel and per-step overheads measured on real traces (data-build/measure_engine_overheads.py)."""
    return read_toml("engine_overheads.toml")


def gemm_efficiency() -> dict[str, Any]:
    """Measured GEMM efficiency curves per GPU (data-build/measure_gemm_efficiency.py)."""
    return read_toml("gemm_efficiency.toml")


def kernel_counts() -> dict[str, Any]:
    """Kernels per layer measured on real traces (data-build/measure_kernels_per_layer.py)."""
    return read_toml("kernel_counts.toml")


def engine_names() -> list[str]:
    """The engines with a defaults file: the names of specs/data/engines/<engine>.toml, sorted."""
    root = DATA / "engines"
    return sorted(e.name.removesuffix(".toml") for e in root.iterdir() if e.name.endswith(".toml"))


DEFAULT_ENGINE = "vllm"  # the engine a scenario runs when none is named (--backend's default; specs.engines)


def engines_in_order() -> tuple[str, ...]:
    """The engine names (`engine_names`), the default engine first: `specs.engines.ENGINES`, without parsing the
    files (the trace's "% of achievable" and the op-curve domains need the names only: issue 30)."""
    names = engine_names()
    if DEFAULT_ENGINE not in names:
        raise BadConfig(f"specs/data/engines/: no {DEFAULT_ENGINE}.toml (the default engine)")
    return (DEFAULT_ENGINE, *sorted(n for n in names if n != DEFAULT_ENGINE))


def engine_file(name: str) -> dict[str, Any]:
    """One engine's defaults by release, each with its source (engines/<name>.toml; specs.engines resolves)."""
    return read_toml(f"engines/{name}.toml")


def engine_files() -> dict[str, dict[str, Any]]:
    """Each engine's defaults by release (`engine_file` of every engine)."""
    return {name: engine_file(name) for name in engine_names()}


def spec_host() -> dict[str, Any]:
    """The fitted host costs of speculative decoding and their error (data-build/fit_spec_host.py)."""
    return read_toml("spec_host.toml")


def source_keys() -> dict[str, Any]:
    """The citation of each source key the data files' `source` strings cite, and of the words they use instead
    (sources.toml: `keys`, `words`)."""
    return read_toml("sources.toml")


def error_ranges() -> Any:
    """Cross-validated error quantiles per case and the same-box change error (data-build/validation_report.py)."""
    return read_json("ranges.json")


def calibrated_ranges() -> Any:
    """The 80% range of a prediction calibrated on the user's own points, measured held out on the validation
    series (data-build/calibrated_ranges.py)."""
    return read_json("calibrated_ranges.json")


def routing() -> dict[str, Any]:
    """Expert-routing skew per model family, with sources (routing.toml; perfmodel/routing.py prices it)."""
    return read_toml("routing.toml")


def opcurve_systems() -> list[str]:
    """The systems with measured per-op curves: the names of specs/data/opcurves/<system>.json, sorted."""
    root = DATA / "opcurves"
    return sorted(e.name.removesuffix(".json") for e in root.iterdir() if e.name.endswith(".json"))


def opcurves(system: str) -> Any:
    """One system's measured per-op curves from aiconfigurator-core (data-build/extract_op_curves.py)."""
    return read_json(f"opcurves/{system}.json")


def step_host_cost() -> dict[str, Any]:
    """MoE routing kernels per layer and their measured durations, and a decode step's host time, measured on real
    traces (data-build/measure_step_host_cost.py)."""
    return read_toml("step_host_cost.toml")
