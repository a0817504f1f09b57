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
