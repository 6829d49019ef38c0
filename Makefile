# The two commands of the quick start: `make demo` and `make test`.
.PHONY: demo test lint bench

demo:
	scripts/bootstrap.sh
	.venv/bin/cxg demo

test:
	scripts/bootstrap.sh dev
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/python -m pytest

bench:
	scripts/bootstrap.sh dev
	.venv/bin/python -m loadtests.bench_storage --sf 1 --json docs/bench/storage_sf1.json
