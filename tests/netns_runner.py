"""Run servescope commands in this one process (Click's runner) and write their exit codes as JSON, then connect a Unix
socket to CANARY (a path that does not exist) so the trace shows it saw this process: the program
tests/cli/test_cli_network.py runs under `unshare -rn strace -f`, so that one interpreter start and one trace of
system calls cover every command.

    python tests/netns_runner.py COMMANDS.json RESULTS.json    # COMMANDS.json: a list of argument lists
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

CANARY = "/nonexistent/servescope-netns-canary"


def main() -> None:
    from click.testing import CliRunner

    from servescope.cli import main as cli

    commands = json.loads(Path(sys.argv[1]).read_text())
    results = []
    for args in commands:
        result = CliRunner().invoke(cli, args)
        error = None if result.exception is None or isinstance(result.exception, SystemExit) else repr(
            result.exception)
        results.append({"args": args, "exit_code": result.exit_code, "error": error,
                        "stderr": result.stderr[-2000:]})
    Path(sys.argv[2]).write_text(json.dumps(results))
    with socket.socket(socket.AF_UNIX) as canary:  # a connect the tracer must see: proof that it traced at all
        canary.connect_ex(CANARY)


if __name__ == "__main__":
    main()
