"""Symbolic dimensions, views on graph edges, and the index expressions they produce."""
from .dims import Dim, dim, dims_equal, evaluate_dim, free_symbols, prod
from .view import View, ViewStack
