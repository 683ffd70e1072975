"""`python -m refcomp ...` runs the command line (see refcomp/cli.py)."""
import sys

from .cli import main

sys.exit(main())
