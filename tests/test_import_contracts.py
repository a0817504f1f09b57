"""The import contracts cover what they name: every private module of trace/ is in the contract that keeps other
packages out of them, and the ground-floor contract lists every ground-floor module (tests/test_house.py
TOP_MODULES), so a new file cannot slip past .importlinter unlisted."""

from __future__ import annotations

import configparser
from pathlib import Path

import servescope
from test_house import TOP_MODULES

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(servescope.__file__).parent


def contract(name: str) -> configparser.SectionProxy:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter", encoding="utf-8")
    return cfg[f"importlinter:contract:{name}"]


def modules(value: str) -> set[str]:
    return {line.strip() for line in value.splitlines() if line.strip()}


def test_every_private_trace_module_is_forbidden_to_other_packages():
    private = {f"servescope.trace.{p.stem}" for p in (SRC / "trace").glob("_*.py") if p.stem != "__init__"}
    assert private  # the glob found the modules
    assert modules(contract("trace-private-modules")["forbidden_modules"]) == private
    sources = modules(contract("trace-private-modules")["source_modules"])
    packages = {f"servescope.{p.name}" for p in SRC.iterdir() if (p / "__init__.py").is_file()} - {"servescope.trace"}
    assert packages <= sources


def test_the_ground_floor_contract_lists_every_ground_floor_module():
    # the top-level modules that are neither entry points nor the advise stage
    floor = {f"servescope.{n[:-3]}" for n in TOP_MODULES - {"__init__.py", "__main__.py", "advise.py", "py.typed"}}
    assert {"servescope.errors", "servescope.units", "servescope._paths"} <= floor
    assert modules(contract("ground-floor")["source_modules"]) == floor
    stages = {f"servescope.{p.name}" for p in SRC.iterdir() if (p / "__init__.py").is_file()} | {"servescope.advise"}
    assert modules(contract("ground-floor")["forbidden_modules"]) == stages
