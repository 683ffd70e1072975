"""refcomp's version, in the lowest layer: program files carry it (exec.saved) and `refcomp --version`
prints it when the distribution is not installed. Keep it equal to pyproject.toml's."""
__version__ = "0.1.0"
