"""Kernels on encoded columns: one interface, a NumPy and a CuPy backend."""
