"""`python -m servescope` runs the CLI."""

from servescope.cli import main

if __name__ == "__main__":
    main()
