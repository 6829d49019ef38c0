"""Benchmarks and load tests; each runs as `python -m loadtests.<name>`."""
