"""Test-session settings. In CI (CI=true) Hypothesis runs derandomized: the same examples every run, so a landing
never fails on a draw no developer ever saw; random exploration happens on developer machines and in `make fuzz`,
and every failure found there is kept as an explicit @example or regression test."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Piped text is 120 columns unless COLUMNS says otherwise (cli._app._console): tests that read tables expect the
# default, whatever the shell running them exports; tests of COLUMNS set it themselves.
os.environ.pop("COLUMNS", None)


def pytest_collection_finish(session: object) -> None:
    """Every object alive once the tests are collected (the imported modules of servescope, Polars, NumPy,
    Hypothesis, pytest: ~10^6 objects) moves to CPython's permanent generation, so that the cyclic GC's full passes
    during the tests stop rescanning them (as the console process raises its thresholds, cli._app.GC_THRESHOLDS):
    ~5% of the suite's CPU seconds. Objects the tests make are collected as before (thresholds unchanged)."""
    import gc

    gc.collect()
    gc.freeze()
