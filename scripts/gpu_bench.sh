#!/usr/bin/env bash
# The GPU benchmark as one command, for a machine with a CUDA device and CuPy (docs/gpu.md): the
# packages its Python lacks installed from the wheels in $WHEELS (default .whl, made by
# scripts/gpu_wheels.sh where a registry is reachable), then `benchmarks.bench_gpu` at SF $SF
# (default 10) under a limit of $LIMIT seconds (default 540, killed 20 s after): lineitem generated
# on the machine's cores and kept in $DATA (default /tmp/cxg-gpu) for a second run, the figures
# written to OUT_DIR/gpu.json after every stage and the output to OUT_DIR/gpu.log. Further
# arguments go to bench_gpu (`--standin` runs it all on the CPU's stand-in of CuPy).
# Usage: scripts/gpu_bench.sh OUT_DIR [bench_gpu options]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_bench.sh OUT_DIR [bench_gpu options]}
shift
mkdir -p "$out"
default=python3
[ -x .venv/bin/python ] && default=.venv/bin/python  # where the project was bootstrapped
python=${PYTHON:-$default}
wheels=${WHEELS:-.whl}
if compgen -G "$wheels/*.whl" >/dev/null; then
    site=${SITE:-/tmp/cxg-site}
    echo "gpu_bench: installing $(ls "$wheels"/*.whl | wc -l) wheels into $site" >&2
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$wheels"/*.whl || exit 1
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$python" -c "import benchmarks.bench_gpu" || exit 1  # a missing package, said before any time is spent
timeout --signal=INT --kill-after=20 "${LIMIT:-540}" "$python" -m benchmarks.bench_gpu --sf "${SF:-10}" \
    --data "${DATA:-/tmp/cxg-gpu}" --json "$out/gpu.json" "$@" 2>&1 | tee "$out/gpu.log"
