"""`python -m rasterkit` (installed) or `python -m utils` (from the repository root): the CLI."""

from .cli import main

if __name__ == "__main__":  # not when a tool imports every module of the package
    raise SystemExit(main())
