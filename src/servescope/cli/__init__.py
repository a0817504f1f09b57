"""Command line: thin. Each command is one library call plus rendering; errors become one line, exit 1.

One module per command (or family of commands); importing this package registers them all on `main`.
"""

from servescope.cli import (  # noqa: F401  (registers the commands)
    diff_cmd,  # noqa: F401  (servescope diff)
    export_cmd,  # noqa: F401  (servescope export)
    model_cmd,
    plan_cmd,
    report_cmd,  # noqa: F401  (servescope report)
    simulate_cmd,  # noqa: F401  (servescope simulate)
    trace_cmd,
    verify_cmd,  # noqa: F401  (servescope verify)
)
from servescope.cli._app import main, run

__all__ = ["main", "run"]
