"""Start fast (issue 30 item 1): the CLI imports what the command it runs uses, nothing more. Checked as work (which
modules are in sys.modules, in a fresh interpreter), never as seconds: the wall times are in bench/bench_start.py.

Heavy libraries: NumPy and Polars (the analysis and the model), Rich (text output only), Plotly and Jinja2 (HTML),
msgspec (the trace reader), PyArrow, SciPy and Ray; servescope's own model (perfmodel) and the trace analysis."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import servescope.cli
from servescope.cli import COMMAND_MODULES

HEAVY = ("numpy", "polars", "rich", "plotly", "jinja2", "msgspec", "pyarrow", "scipy", "ray")
OURS = ("servescope.perfmodel", "servescope.simulate", "servescope.calibrate", "servescope.planner",
        "servescope.validation", "servescope.trace", "servescope.analysis.analyze", "servescope.report")
# Runs ARGS through the CLI in this fresh interpreter (nothing else imported first) and prints the modules loaded.
PROBE = """
import json, sys
from servescope.cli import main
args = sys.argv[1:]
if args:
    try:
        main.main(args, prog_name="servescope")
    except SystemExit:
        pass
print("\\n" + json.dumps(sorted(sys.modules)))
"""
CLI_DIR = Path(servescope.cli.__file__).parent


def loaded(*args: str) -> set[str]:
    """Modules in sys.modules after importing the CLI and running `servescope ARGS` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in (*HEAVY, *OURS) if m in modules or any(n.startswith(m + ".") for n in modules))


@pytest.mark.parametrize("args", [(), ("--help",), ("--version",), ("trace", "--help"), ("model", "--help"),
                                  ("simulate", "--help"), ("plan", "--help"), ("report", "--help")],
                         ids=lambda a: " ".join(a) or "import")
def test_importing_the_cli_and_help_load_no_heavy_module(args: tuple[str, ...]) -> None:
    assert heavy_in(loaded(*args)) == []


def test_a_command_loads_its_own_module_only() -> None:
    """`trace --help` imports trace_cmd and no other command's module (nor the engine tables their options read)."""
    modules = loaded("trace", "--help")
    commands = {m for m in modules if m.startswith("servescope.cli.") and m.endswith("_cmd")}
    assert commands == {"servescope.cli.trace_cmd"}
    assert "servescope.specs.engines" not in modules
    assert {"servescope.cli.model_cmd", "servescope.specs.engines"} <= loaded("model", "--help")


def test_trace_as_json_does_not_load_the_text_renderer() -> None:
    """`trace --json` on the bundled example uses Polars, NumPy and msgspec, not Rich, Plotly or Jinja2."""
    modules = loaded("trace", "--json")
    assert {"polars", "numpy", "msgspec"} <= modules
    assert [m for m in ("rich", "plotly", "jinja2") if m in modules] == []
    assert "rich" in loaded("trace")  # the text output does use it: the probe sees imports


def _registered(source: Path) -> set[str]:
    """Names of the commands a module registers on `main` (`@main.command()`, `@main.group()`, with or without a
    name), read from its source."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            func = call.func if call is not None else deco
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "main":
                given = call.args[0] if call is not None and call.args else None
                names.add(given.value if isinstance(given, ast.Constant) else node.name.replace("_", "-"))
    return names


def test_the_command_table_names_every_command_and_its_module() -> None:
    """COMMAND_MODULES (what the lazy table imports per command) is what the modules register, read from their
    source: a command added without its line would only be found by importing every module."""
    from_source = {name: path.stem for path in sorted(CLI_DIR.glob("*_cmd.py")) for name in _registered(path)}
    assert from_source == COMMAND_MODULES


def test_an_unknown_command_is_still_one_line_and_every_command_is_listed() -> None:
    from click.testing import CliRunner

    from servescope.cli import main

    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 1 and result.stderr.startswith("servescope: No such command")
    assert set(main.commands) == set(COMMAND_MODULES)
    assert all(name in main.commands for name in COMMAND_MODULES) and "no-such-command" not in main.commands


def test_trace_loads_the_model_curves_it_uses_not_the_model() -> None:
    """The trace's "% of achievable" reads perfmodel.opcurve (the measured GEMM curves); perfmodel's names load
    lazily, so the scenario, step and serving modules (the closed form) are not imported, and one file starts no
    worker pool (multiprocessing loads only when a rank folder's pool starts); servescope.advise's names load
    lazily too, so the plan's glue (advice, measure) is not imported."""
    modules = loaded("trace", "--json")
    assert {"servescope.perfmodel.opcurve", "servescope.advise.peaks"} <= modules
    assert [m for m in ("servescope.perfmodel.scenario", "servescope.perfmodel.step", "servescope.perfmodel.serving",
                        "multiprocessing", "concurrent.futures.process", "servescope.advise.advice",
                        "servescope.advise.measure") if m in modules] == []


def test_perfmodel_names_load_on_first_use() -> None:
    """`import servescope.perfmodel` runs no submodule; each public name is its defining module's object."""
    probe = ("import json, sys, servescope.perfmodel as p\n"
             "before = sorted(m for m in sys.modules if m.startswith('servescope.perfmodel.'))\n"
             "where = {n: getattr(p, n).__module__ if hasattr(getattr(p, n), '__module__') else None "
             "for n in p.__all__}\n"
             "print(json.dumps([before, where, sorted(set(p.__all__) - set(dir(p)))]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, where, undir = json.loads(out.stdout)
    assert before == [] and undir == []
    assert where["Scenario"] == "servescope.perfmodel.scenario" and where["predict"] == "servescope.perfmodel.serving"
    assert where["decode_step"] == "servescope.perfmodel.step" and where["max_concurrency"] == "servescope.perfmodel.memory"
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        import servescope.perfmodel as perfmodel

        _ = perfmodel.nonexistent  # type: ignore[attr-defined]


PLANNER = ("servescope.planner", "servescope.report.plan_doc", "servescope.report.plan_text", "servescope.calibrate")
SIMULATE_1 = ("simulate", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--concurrency", "1", "--num-prompts", "1")


def _of(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m in packages or m.startswith(tuple(p + "." for p in packages)))


@pytest.mark.parametrize("fmt", [("--json",), ()], ids=["json", "text"])
def test_simulate_loads_the_model_and_the_simulation_not_the_planner(fmt: tuple[str, ...]) -> None:
    """`simulate` prices steps (perfmodel) and runs the loop (simulate); the scenario's title and document come
    from report.titles, so neither the planner (its package runs planner.plan), plan_doc, plan_text nor the
    calibration is imported; the bench readers (validation) load only for a file that needs them; Rich for text
    only; the specs data is opened by path (specs.tables.DATA), not through importlib.resources (~7 ms)."""
    modules = loaded(*SIMULATE_1, *fmt)
    assert {"servescope.simulate.loop", "servescope.perfmodel.step", "servescope.report.titles"} <= modules
    assert _of(modules, PLANNER) == []
    assert "importlib.resources" not in modules
    assert _of(modules, ("servescope.validation",)) == []
    assert ("rich" in modules) == (fmt == ())


def test_simulate_replay_loads_its_reader_not_the_planner(tmp_path: Path) -> None:
    replay = tmp_path / "replay.csv"
    replay.write_text("arrival_s,input_len,output_len\n0.0,100,10\n0.5,200,20\n")
    modules = loaded(*SIMULATE_1[:5], "--replay", str(replay), "--json")
    assert "servescope.validation.benchio" in modules and "servescope.simulate.loop" in modules
    assert _of(modules, PLANNER) == []


@pytest.mark.parametrize("fmt", [("--json",), ()], ids=["json", "text"])
def test_trace_loads_no_planner(fmt: tuple[str, ...]) -> None:
    """`trace` on the bundled example: neither the planner (planner.plan and its tracks) nor plan_doc."""
    modules = loaded("trace", *fmt)
    assert "servescope.analysis.analyze" in modules
    assert _of(modules, PLANNER) == []


def test_trace_reads_the_engine_names_not_the_engine_files() -> None:
    """The trace's "% of achievable" tries the engines' GEMM curves in specs.engines.ENGINES' order, and the op-curve
    domains check their engine against it: both take the names from the files' names (specs.tables), so the engine
    registry (specs.engines, its TOML parser engine_file) is not imported; difflib loads only for an unknown name."""
    modules = loaded("trace", "--json")
    assert "servescope.specs.opcurves" in modules
    assert [m for m in ("servescope.specs.engines", "servescope.specs.engine_file", "difflib") if m in modules] == []


def test_engine_order_without_the_registry_is_the_registry_order() -> None:
    from servescope.specs import tables
    from servescope.specs.engines import DEFAULT_ENGINE, ENGINES

    assert tables.engines_in_order() == ENGINES and ENGINES[0] == DEFAULT_ENGINE == tables.DEFAULT_ENGINE


# The console entry point (`servescope`, `python -m servescope`) with ARGS; at exit (exit_now runs the atexit
# handlers) the GC thresholds and the collections each generation ran once `run` started, as JSON on stderr.
GC_PROBE = """
import atexit, gc, json, sys
sys.argv = ["servescope", *sys.argv[1:]]
from servescope.cli import run
before = [s["collections"] for s in gc.get_stats()]
atexit.register(lambda: sys.stderr.write("\\n" + json.dumps([gc.get_threshold(), [s["collections"] - b for s, b in
                                                              zip(gc.get_stats(), before)]]) + "\\n"))
run()
"""


def test_the_console_process_runs_few_gc_passes() -> None:
    """`servescope trace --json` on the bundled example: the console process runs the cyclic GC at mypy's thresholds
    (cli._process.GC_THRESHOLDS), so no pass rescans the imported modules' objects (Python's 700 gave ~150 passes,
    ~14 of them over the older generations: 40-110 ms; bench/bench_start.py). Counted from `run`'s start (the
    CLI's own import runs before it sets them). Library callers (`main`) keep Python's thresholds."""
    from servescope.cli._process import GC_THRESHOLDS

    out = subprocess.run([sys.executable, "-c", GC_PROBE, "trace", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    thresholds, collections = json.loads(out.stderr.strip().splitlines()[-1])
    assert tuple(thresholds) == GC_THRESHOLDS
    assert collections[2] == 0 and sum(collections) <= 2  # Python's thresholds: ~150 passes, ~1 full
    library = subprocess.run([sys.executable, "-c", "import gc, servescope.cli; print(gc.get_threshold()[0])"],
                             capture_output=True, text=True, check=True)
    assert int(library.stdout) == 700


# The console entry point with ARGS; at exit, the threads the process holds (Linux) and OPENBLAS_NUM_THREADS.
THREAD_PROBE = """
import atexit, os, sys
sys.argv = ["servescope", *sys.argv[1:]]
atexit.register(lambda: sys.stderr.write("\\n%d %s\\n" % (len(os.listdir("/proc/self/task")),
                                                          os.environ.get("OPENBLAS_NUM_THREADS"))))
from servescope.cli import run
run()
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_the_console_process_starts_no_blas_thread_pool() -> None:
    """`simulate` (NumPy, no Polars) in the console process: OpenBLAS runs on the calling thread, so the process ends
    with its one thread (OpenBLAS's pool is one thread per core: 2 on a 2-core machine); a thread count the user
    set is kept (cli._process.one_blas_thread)."""
    from servescope.cli._process import BLAS_THREAD_VARIABLES

    base = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}

    def threads(env: dict[str, str]) -> tuple[int, str]:
        out = subprocess.run([sys.executable, "-c", THREAD_PROBE, *SIMULATE_1, "--json"], capture_output=True,
                             text=True, env=env)
        assert out.returncode == 0, out.stderr
        count, value = out.stderr.strip().splitlines()[-1].split()
        return int(count), value

    assert threads(base) == (1, "1")
    assert threads({**base, "OPENBLAS_NUM_THREADS": "2"})[1] == "2"


def test_text_output_replaces_no_emoji_codes() -> None:
    """The text consoles print names as written (report.fit.FittingConsole: emoji=False): `:100:` in a kernel name
    is not Rich's emoji, and Rich's emoji table is not imported by `trace`."""
    import io

    from servescope.report.fit import FittingConsole

    console = FittingConsole(file=io.StringIO(), width=80)
    console.print("gemm_kernel:100: ::fire:: :fire:")
    assert console.file.getvalue() == "gemm_kernel:100: ::fire:: :fire:\n"  # type: ignore[attr-defined]
    assert "rich._emoji_codes" not in loaded("trace")
