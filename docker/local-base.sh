#!/usr/bin/env bash
# A base image made from Debian's own packages, for building the images where no container registry
# is reachable: Debian 12's Python 3.11 with pip and a Java 17 runtime at /opt/java/openjdk, so it
# serves as both PYTHON_IMAGE and JRE_IMAGE of docker/*.Dockerfile. pip in the builds trusts the
# host's certificate authorities (its bundle is copied in: a proxy's CA, where there is one).
# Usage (as root, with debootstrap and podman): docker/local-base.sh [TAG]   (default cxg-base:bookworm-1)
set -euo pipefail
tag=${1:-cxg-base:bookworm-1}
root=$(mktemp -d /tmp/cxg-base.XXXXXX)
chmod 0755 "$root"  # the image's / (mktemp makes it the owner's only)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,openjdk-17-jre-headless,ca-certificates \
    bookworm "$root" http://deb.debian.org/debian >/dev/null
# Java where the images take it from (COPY --from=jre /opt/java/openjdk); Debian's path still works
jvm=$root/usr/lib/jvm/java-17-openjdk-amd64
mkdir -p "$root/opt/java"
mv "$jvm" "$root/opt/java/openjdk"
ln -s /opt/java/openjdk "$jvm"
ln -sf python3 "$root/usr/bin/python"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/host-ca-certificates.crt"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | podman --storage-driver vfs import \
    --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$tag" >/dev/null
echo "$tag"
