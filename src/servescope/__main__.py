"""`python -m servescope` runs the CLI."""

from servescope.cli import run

if __name__ == "__main__":
    run()
