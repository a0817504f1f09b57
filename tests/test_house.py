"""The house rules of issue 16, checked on the code itself: the top level reads as the pipeline; no import cycle,
type-only imports included (grimp sees them); the model and the simulation open no file; the public API is
importable, documented and listed; each fact has one source (GPU names, the rank a trace calibrates on, the
warnings that come with it)."""

from __future__ import annotations

import ast
import gzip
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grimp
import pytest
from click.testing import CliRunner

import servescope
from servescope.advise import advise, calibration_rank, overview
from servescope.analysis.analyze import analyze_trace, example_trace
from servescope.cli import main
from servescope.perfmodel import Scenario
from servescope.specs.hardware import load_gpu

SRC = Path(servescope.__file__).parent
STAGES = {"trace", "analysis", "specs", "perfmodel", "simulate", "validation", "calibrate", "planner", "report", "cli"}
# ground floor: errors, units, _paths, _lazy (PEP 562 re-exports) and progress (a stdlib-only callback every stage
# may report to) sit below every stage; __init__/__main__ the entry points. advise, the glue between planner and report, is a package of
# four modules (peaks, calibration, advice, measure)
TOP_MODULES = {"__init__.py", "__main__.py", "errors.py", "units.py", "_paths.py", "_lazy.py", "progress.py",
               "py.typed"}
GLUE = {"advise"}


def test_top_level_is_the_pipeline() -> None:
    entries = {p.name for p in SRC.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    modules = {n for n in entries if n.endswith((".py", ".typed"))}
    assert packages == STAGES | GLUE
    assert modules == TOP_MODULES  # ≤ 7 modules besides the marker file
    progress = ast.parse((SRC / "progress.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(progress) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(progress) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("servescope")}  # the ground floor imports no stage
    assert entries - packages - modules == {"examples"}  # the bundled trace


def test_the_cli_starts_without_numpy_or_polars() -> None:
    """Commands import their library when they run: start-up stays fast and rank workers can fork."""
    code = "import sys, servescope.cli; print(sorted(m for m in ('numpy', 'polars') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("servescope", include_external_packages=False)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported, module):
                cycles.append(f"{module} -> {imported} -> … -> {module}")
    assert cycles == []


# --- the model opens no file ----------------------------------------------------------------------------------

_OPENERS = {"open", "read_text", "read_bytes", "load", "loads", "loadtxt", "genfromtxt", "fromfile", "files",
            "read_csv", "reader", "DictReader", "connect", "iterdir", "glob", "rglob"}
_FILE_MODULES = {"tomllib", "json", "csv", "sqlite3", "importlib.resources", "pickle", "msgspec", "gzip"}


def _model_sources() -> Iterator[Path]:
    for stage in ("perfmodel", "simulate"):
        yield from sorted((SRC / stage).rglob("*.py"))


@pytest.mark.parametrize("path", list(_model_sources()), ids=lambda p: str(p.relative_to(SRC)))
def test_model_source_calls_no_file_reader(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not imported & _FILE_MODULES, f"{path.name} imports a file reader"
    assert not calls & _OPENERS, f"{path.name} calls {sorted(calls & _OPENERS)}"


_WATCH_OPENS = """
import builtins, inspect, io, pathlib, sys
seen = []
def who():
    for frame in inspect.stack()[2:]:
        name = frame.frame.f_globals.get("__name__", "")
        if name.startswith("servescope"):
            return name
    return "?"
def wrap(fn):
    def opened(*args, **kwargs):
        seen.append(who())
        return fn(*args, **kwargs)
    return opened
builtins.open, io.open, pathlib.Path.open = wrap(builtins.open), wrap(io.open), wrap(pathlib.Path.open)
from servescope.perfmodel import Scenario, predict
from servescope.simulate import simulate
sc = Scenario.build(model="qwen3-32b", gpu="h200", tp=2)
predict(sc, [1, 8])
simulate(sc, "closed", 4, num_prompts=8)
print("\\n".join(seen))
"""


def test_model_and_simulation_open_no_file_at_run_time() -> None:
    """In a fresh interpreter (cold caches), every file opened while building, predicting and simulating a scenario
    is opened by specs (or the stdlib), never by perfmodel or simulate."""
    out = subprocess.run([sys.executable, "-c", _WATCH_OPENS], capture_output=True, text=True, check=True)
    readers = set(out.stdout.split())
    assert any(r.startswith("servescope.specs") for r in readers), readers  # the watch saw the data files
    assert not {r for r in readers if r.startswith(("servescope.perfmodel", "servescope.simulate"))}, readers


# --- the public API ---------------------------------------------------------------------------------------------

def test_every_public_name_is_importable_documented_and_listed() -> None:
    doc = servescope.__doc__ or ""
    for name in servescope.__all__:
        obj = getattr(servescope, name)
        assert name == "__version__" or name in doc, f"{name} not in servescope's docstring"
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
    assert set(servescope.__all__) <= set(dir(servescope))  # the lazy names show in dir() and completion
    star: dict[str, Any] = {}
    exec("from servescope import *", star)  # noqa: S102 - what a user's star import gets
    assert set(servescope.__all__) <= set(star)
    with pytest.raises(AttributeError):
        servescope.not_a_public_name  # noqa: B018


@pytest.mark.parametrize("package", ["trace", "analysis", "specs", "perfmodel", "simulate", "planner"])
def test_each_stage_lists_what_it_exports(package: str) -> None:
    mod = __import__(f"servescope.{package}", fromlist=["__all__"])
    assert mod.__doc__ and mod.__all__
    for name in mod.__all__:
        assert hasattr(mod, name), f"servescope.{package}.{name} is listed but not importable"


# --- one source per fact ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["gb200_sxm", "b200_sxm", "h100_sxm", "H100-SXM", "rtx pro 6000"])
def test_specs_and_model_resolve_one_gpu(spelling: str) -> None:
    model = Scenario.build(model="llama-3.1-8b", gpu=spelling, tp=1).gpu
    assert load_gpu(spelling) is model
    shown = CliRunner().invoke(main, ["specs", "show", spelling, "--json"])
    assert shown.exit_code == 0, shown.output
    assert f'"{model.name}"' in shown.output


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled real B200 trace (TraceLens, MIT) cut short: a trace whose analysis carries a warning."""
    data = gzip.decompress(example_trace().read_bytes())
    path = tmp_path_factory.mktemp("house") / "cut.json"
    path.write_bytes(data[: int(len(data) * 0.97)])
    return path


def test_plan_and_report_calibrate_alike_with_the_same_warnings(truncated: Path) -> None:
    sc = Scenario.build(model="gpt-oss-120b", gpu="b200_sxm", tp=8)
    plan_cal = advise(sc, truncated).calibration
    report_cal = overview(truncated, sc).calibration
    assert plan_cal is not None and report_cal is not None
    assert plan_cal == report_cal
    assert any(w.startswith("trace: ") and "truncated" in w for w in report_cal.warnings)


def test_the_calibrated_rank_is_the_first_with_steps() -> None:
    a = analyze_trace(example_trace())
    two = replace(a, ranks=(replace(a.ranks[0], rank=0, steps=()), replace(a.ranks[0], rank=1)))
    assert calibration_rank(two).rank == 1
    assert calibration_rank(a) is a.ranks[0]
