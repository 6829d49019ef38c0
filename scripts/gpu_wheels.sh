#!/usr/bin/env bash
# The wheels of the pinned packages the GPU benchmark needs and a CUDA machine's own Python image
# commonly lacks, downloaded where a package registry is reachable, for a machine where none is
# (scripts/gpu_bench.sh installs them there). Spark and DataFusion are not among them: the
# benchmark's single-table queries load neither.
# Usage: scripts/gpu_wheels.sh [DIR [PYTHON_VERSION]]   (default: .whl and 3.12, x86-64 Linux)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
version=${2:-3.12}
needs=(duckdb sqlglot zstandard tpchgen-cli urllib3)

# each one's pin, from pyproject.toml (its dependencies and extras)
pins=$(python3 - "${needs[@]}" <<'EOF'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
specs = [*project["dependencies"], *(s for extra in project["optional-dependencies"].values() for s in extra)]
pinned = {re.split("[=<>!~ ]", s)[0].lower(): s for s in specs}
print(" ".join(pinned[name] for name in sys.argv[1:]))
EOF
)
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
# shellcheck disable=SC2086  # the pins are words
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
    "${platforms[@]}" -d "$dir" $pins
echo "gpu_wheels: $(ls "$dir"/*.whl | wc -l) wheels in $dir ($(du -sh "$dir" | cut -f1))" >&2
