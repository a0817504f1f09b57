"""`python -m servescope` runs the CLI."""

from servescope.cli import main

main()
