"""Golden cases for refcomp: programs with stored inputs and expected outputs (see refcomp/golden.py)."""
