#!/usr/bin/env bash
# Builds the CPU images (gateway, node, Spark) with podman, from the repository root, each with its
# own ignore file; with --local-base, on a base made from Debian's packages (docker/local-base.sh)
# instead of the public tags, where no container registry is reachable. Prints each image's build
# time and size. Needs root, podman and (for --local-base) debootstrap: `make images` installs them.
# Podman runs as this kind of machine allows: vfs storage, cgroupfs, runc, the host's network;
# Docker's image format keeps the images' HEALTHCHECK.
set -euo pipefail
cd "$(dirname "$0")/.."
podman=(podman --storage-driver vfs --cgroup-manager cgroupfs --runtime runc)
bases=()
if [ "${1:-}" = --local-base ]; then
    base=localhost/$(docker/local-base.sh 2>/dev/null | tail -1)
    bases=(--build-arg "PYTHON_IMAGE=$base" --build-arg "JRE_IMAGE=$base")
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
for image in node gateway spark; do
    started=$(date +%s)
    "${podman[@]}" build --format docker --network host "${bases[@]}" --ignorefile "docker/$image.Dockerfile.dockerignore" \
        -f "docker/$image.Dockerfile" -t "cxg-$image:$version" . >/dev/null
    size=$("${podman[@]}" image inspect --format '{{.Size}}' "cxg-$image:$version")
    echo "cxg-$image:$version built in $(($(date +%s) - started)) s, $((size / 1000000)) MB"
done
