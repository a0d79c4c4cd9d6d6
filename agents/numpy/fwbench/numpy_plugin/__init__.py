"""The NumPy plugin: gemm on whatever BLAS numpy links (OpenBLAS in the PyPI wheels)."""
