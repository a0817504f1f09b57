"""Typed errors. The CLI turns each into one line and exit code 1; the library never prints.

    ServescopeError
    ├── TraceError            a trace file or folder cannot be analysed
    │   ├── TraceNotFound     the path does not exist
    │   ├── NotATrace         the file is not a Kineto/Chrome trace (or is unreadable beyond repair)
    │   ├── EmptyTrace        the trace holds no events
    │   ├── NoGpuEvents       a CPU-only or front-end trace: nothing ran on a GPU
    │   └── CaptureMismatch   a graph-capture trace of another GPU or model than the replay trace
    ├── SpecError             hardware or model specs
    │   ├── UnknownName       an unknown GPU or model name (message lists the known ones)
    │   └── BadConfig         a malformed config.json or spec file
    ├── ScenarioError         an impossible scenario (parallelism, memory)
    ├── PlanError             a plan that cannot be made (trace and scenario disagree, bad target, ...)
    ├── MeasurementError      a measured input that cannot be read or used (a bad typed figure, a before/after
    │                         measurement that does not give the plan's objective)
    └── OutputError           an output that cannot be made (a missing optional extra, an unwritable -o path)
"""

from __future__ import annotations


class ServescopeError(Exception):
    """Base of every error servescope raises on purpose."""


class TraceError(ServescopeError):
    """A trace file or folder cannot be analysed."""


class TraceNotFound(TraceError):
    """The path does not exist."""


class NotATrace(TraceError):
    """The file is not a Kineto/Chrome trace, or is damaged beyond repair."""


class EmptyTrace(TraceError):
    """The trace holds no events."""


class NoGpuEvents(TraceError):
    """A CPU-only or front-end trace: no kernel ran on a GPU."""


class SpecError(ServescopeError):
    """Hardware or model specs cannot be read."""


class UnknownName(SpecError):
    """An unknown GPU or model name."""


class BadConfig(SpecError):
    """A malformed config.json or spec file."""


class ScenarioError(ServescopeError):
    """An impossible scenario: parallelism that does not divide, a model that does not fit."""


class PlanError(ServescopeError):
    """A plan that cannot be made: trace and scenario disagree, a bad target or track name."""


class MeasurementError(ServescopeError):
    """A measured input that cannot be read or used: a malformed typed figure (`tpot=12.1ms@c1`), or a before/after
    measurement that does not give the objective asked for."""


class OutputError(ServescopeError):
    """An output that cannot be made: a format whose optional extra is not installed, an unwritable -o path."""


class CaptureMismatch(TraceError):
    """A graph-capture trace that does not belong to the replay trace (another GPU or model), or gives no shapes."""
