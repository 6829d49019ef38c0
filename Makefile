# The two commands of the quick start: `make demo` and `make test`; `make check` is the fast lane.
.PHONY: demo test check check-kernels check-rest lint bench images deploy

demo:
	scripts/bootstrap.sh
	.venv/bin/cxg demo

test:
	scripts/bootstrap.sh dev
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports --no-logo
	.venv/bin/python -m pytest -m "not gpu" -n 2 --dist loadfile --no-loadscope-reorder
	.venv/bin/python -m pytest -m gpu --cov=gpu_kernels.cupy_backend --cov=gpu_kernels.device_pipeline --cov=gpu_kernels.resident --cov=gpu_kernels.streamed --cov=gpu_kernels.pinned \
		--cov-report=term-missing --cov-fail-under=100

# The fast lane: the tests marked `check`, from the modules that mark them (the others are not even
# imported), the kernels' beside the rest on the second core.
CHECK_TESTS = $(shell grep -l "pytest.mark.check" tests/test_*.py)
CHECK_KERNELS = tests/test_kernels.py

check:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports --no-logo
	$(MAKE) -j2 --output-sync=target --no-print-directory check-kernels check-rest

check-kernels check-rest:
	.venv/bin/python -m pytest -m "check and not gpu" -q -p no:cacheprovider \
		$(if $(filter check-kernels,$@),$(CHECK_KERNELS),$(filter-out $(CHECK_KERNELS),$(CHECK_TESTS)))

bench:
	scripts/bootstrap.sh dev
	.venv/bin/python -m benchmarks.bench_storage --sf 1 --json docs/bench/storage_sf1.json
	.venv/bin/python -m benchmarks.bench_scan --sf 1 --json docs/bench/scan_sf1.json
	.venv/bin/python -m benchmarks.bench_tpch --sf 1 --json docs/bench/tpch_sf1_node.json
	.venv/bin/python -m benchmarks.bench_tpch --sf 1 --threads 1 --json docs/bench/tpch_sf1_node_1thread.json
	.venv/bin/python -m benchmarks.bench_tpch --sf 1 --joins spark --json docs/bench/tpch_sf1.json
	.venv/bin/python -m benchmarks.bench_tpch --sf 1 --joins spark --cluster 2 --json docs/bench/tpch_sf1_cluster.json
	.venv/bin/python -m benchmarks.bench_tpcds --sf 1 --json docs/bench/tpcds_sf1_node.json
	.venv/bin/python -m benchmarks.bench_tpcds --sf 1 --joins spark --json docs/bench/tpcds_sf1.json
	.venv/bin/python -m benchmarks.bench_gateway --dispatch both --json docs/bench/gateway.json
	.venv/bin/python -m benchmarks.bench_service --json docs/bench/service.json
	.venv/bin/python -m benchmarks.bench_performsys --json docs/bench/performsys.json
	.venv/bin/python -m benchmarks.bench_performsys --tables 4.1 --dispatch free-slot-first \
		--plot docs/bench/performsys_speedup_free_slot_first.png --json docs/bench/performsys_free_slot_first.json
	.venv/bin/python -m benchmarks.bench_live --sf 0.1 --users 1,4,16,64 --out docs/bench/live_node \
		--json docs/bench/live_node_sf0.1.json
	.venv/bin/python -m benchmarks.bench_live --sf 1 --users 16,64 --queries 100 --exclude 10 \
		--out docs/bench/live_node_sf1 --json docs/bench/live_node_sf1.json
	.venv/bin/python -m benchmarks.bench_faults --sf 0.1 --json docs/bench/faults_sf0.1.json
	.venv/bin/python -m benchmarks.bench_overload --sf 0.1 --json docs/bench/overload_sf0.1.json
	.venv/bin/python -m benchmarks.bench_regions --json docs/bench/regions_sim.json --plot docs/bench/regions_sim.png
	.venv/bin/python -m benchmarks.bench_regions_live --json docs/bench/regions_live.json --plot docs/bench/regions_live.png
	.venv/bin/python -m benchmarks.bench_regions_live --native --sf 0.1 --json docs/bench/regions_live_native_sf0.1.json
	.venv/bin/python -m benchmarks.bench_rebalance --json docs/bench/rebalance.json
	.venv/bin/python -m pytest tests/test_fuzz.py --long
	.venv/bin/python -m benchmarks.bench_memory --sf 10 --json docs/bench/memory_sf10.json

# The container images with podman (as root; docker/README.md): built on a base made from Debian's
# packages, where no container registry is reachable. `make deploy` runs docker/compose.yaml with them.
PODMAN_PACKAGES = podman runc catatonit debootstrap golang-github-containernetworking-plugin-dnsname

images:
	dpkg -s $(PODMAN_PACKAGES) >/dev/null 2>&1 || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(PODMAN_PACKAGES))
	docker/images.sh --local-base

deploy: images
	scripts/bootstrap.sh dev deploy
	.venv/bin/python -m benchmarks.deploy --no-build
