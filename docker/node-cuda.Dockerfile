# The storage node on an NVIDIA GPU: `cxg node --kind native --backend cupy`, the project installed
# with its `gpu` extra (CuPy for CUDA 12) on NVIDIA's CUDA runtime image (cuBLAS, NVRTC, ...).
# Build from the repository root: docker build -f docker/node-cuda.Dockerfile -t cxg-node-cuda:0.1.0 .
# Run it with the NVIDIA Container Toolkit: docker run --gpus 1 ... (compose: deploy.resources).

# uv installs a pinned CPython (the CUDA image has none) and the project into a virtual environment.
FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM nvidia/cuda:12.9.1-runtime-ubuntu24.04

ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_COMPILE_BYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CXG_HEALTH_URL=http://127.0.0.1:8101/healthz

# The project with its pinned dependencies and the gpu extra; the sources are mounted, not copied.
RUN --mount=from=uv,source=/uv,target=/usr/local/bin/uv \
    --mount=type=bind,target=/src,rw \
    uv venv --no-cache --python 3.11.13 /opt/venv \
    && uv pip install --no-cache "/src[gpu]"

# The data directory belongs to the user, so that a named volume mounted there starts out writable.
RUN groupadd --system --gid 10001 cxg \
    && useradd --system --uid 10001 --gid cxg --create-home --home-dir /home/cxg --shell /usr/sbin/nologin cxg \
    && install -d -o cxg -g cxg /data/node

USER cxg
WORKDIR /home/cxg
EXPOSE 8101

HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import json, os, urllib.request; reply = urllib.request.urlopen(os.environ['CXG_HEALTH_URL'], timeout=4); nodes = os.environ.get('CXG_HEALTH_NODES'); raise SystemExit(nodes is not None and json.load(reply)['nodes'] < int(nodes))"]

ENTRYPOINT ["cxg"]
CMD ["node", "--kind", "native", "--host", "0.0.0.0", "--port", "8101", "--data", "/data/node", "--backend", "cupy"]
