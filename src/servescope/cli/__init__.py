"""Command line: thin. Each command is one library call plus rendering; errors become one line, exit 1.

One module per command (or family of commands), registering on `main` as it is imported. A command's module is
imported when the command is first looked up (`_commands.LazyCommands`, the table below): `servescope trace` imports
trace_cmd and what it uses, not the other commands' option tables; `--help` imports them all.
"""

from servescope.cli._app import main, run
from servescope.cli._commands import load_commands_lazily

# command -> the module that defines it (a name missing here still works: every module is imported to find it)
COMMAND_MODULES = {
    "diff": "diff_cmd", "export": "export_cmd", "model": "model_cmd", "specs": "model_cmd", "validate": "model_cmd",
    "plan": "plan_cmd", "report": "report_cmd", "simulate": "simulate_cmd", "sweep": "simulate_cmd",
    "trace": "trace_cmd", "verify": "verify_cmd",
}
load_commands_lazily(main, {name: f"servescope.cli.{module}" for name, module in COMMAND_MODULES.items()})

__all__ = ["main", "run"]
