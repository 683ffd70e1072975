"""`python -m refcomp.fuzz --count 10000`: see the package docstring."""
import sys

from .cli import main

sys.exit(main())
