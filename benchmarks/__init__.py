"""The benchmarks, the fault harness and the helpers only they use (the kernel checks, GPU timing,
WAN links and network namespaces, a MariaDB server, TPC-DS generation, the stand-in CuPy); each
benchmark runs as `python -m benchmarks.<name>`.

The top of the house: a benchmark may import any package, and nothing of the product imports a
benchmark (an import-linter contract): the product runs without them. The tests import
these modules by name.
"""
