"""`python -m refcomp.fuzz --count 10000`: see docs/reliability.md, "The differential fuzzer"."""
import sys

from .cli import main

sys.exit(main())
