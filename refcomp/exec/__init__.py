"""Executors: the host emulator, the nvcc check and the PyCUDA runtime."""
