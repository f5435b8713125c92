"""`python -m rasterkit` (installed) or `python -m utils` (from the repository root): the CLI."""
from .cli import main

raise SystemExit(main())
