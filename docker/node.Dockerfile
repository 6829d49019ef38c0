# The storage node on the CPU: `cxg node --kind native` with the NumPy kernels.
# Build from the repository root: docker build -f docker/node.Dockerfile -t cxg-node:0.1.0 .
# A deployment adds --name, --advertise (the address the others reach it on) and --upstream.

# The base image, pinned; a build may name another with --build-arg (a local base made from
# Debian's own packages, where no registry is reachable: docker/README.md).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    CXG_HEALTH_URL=http://127.0.0.1:8101/healthz

# The project with its pinned dependencies; the sources are mounted, not copied into a layer.
RUN --mount=type=bind,target=/src,rw \
    pip install --no-cache-dir /src

# The data directory belongs to the user, so that a named volume mounted there starts out writable.
RUN groupadd --system --gid 10001 cxg \
    && useradd --system --uid 10001 --gid cxg --create-home --home-dir /home/cxg --shell /usr/sbin/nologin cxg \
    && install -d -o cxg -g cxg /data/node

USER cxg
WORKDIR /home/cxg
EXPOSE 8101

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import json, os, urllib.request; reply = urllib.request.urlopen(os.environ['CXG_HEALTH_URL'], timeout=4); nodes = os.environ.get('CXG_HEALTH_NODES'); raise SystemExit(nodes is not None and json.load(reply)['nodes'] < int(nodes))"]

ENTRYPOINT ["cxg"]
CMD ["node", "--kind", "native", "--host", "0.0.0.0", "--port", "8101", "--data", "/data/node", "--backend", "numpy"]
