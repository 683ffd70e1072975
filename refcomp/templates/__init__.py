"""Jinja2 templates of the CUDA kernels refcomp emits, one file per kernel kind."""
