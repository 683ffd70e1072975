"""Primitive op definitions (`primitives`) and the high-level ops built from them."""
