"""Lowering: from the primitive graph to kernels, CUDA source and a memory plan."""
