# The gateway image: `cxg gateway` (SQL over HTTP, the region's balancer and its Spark driver),
# `cxg router`, `cxg balance-regions`, and jobs such as `cxg load` and `cxg redistribute`.
# Build from the repository root: docker build -f docker/gateway.Dockerfile -t cxg-gateway:0.1.0 .

# The base images, pinned; a build may name others with --build-arg (a local base made from
# Debian's own packages, where no registry is reachable: docker/README.md).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG JRE_IMAGE=eclipse-temurin:17.0.17_10-jre-noble

# Spark's driver runs in this process: a Java 17 runtime, taken from Eclipse Temurin's image.
FROM ${JRE_IMAGE} AS jre

# The same Python as the Spark image: executors run the driver's interpreter (spark.pyspark.python).
FROM ${PYTHON_IMAGE}

ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/java/openjdk/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    CXG_HEALTH_URL=http://127.0.0.1:8080/healthz

COPY --from=jre /opt/java/openjdk /opt/java/openjdk

# The project with its pinned dependencies; the sources are mounted, not copied into a layer.
RUN --mount=type=bind,target=/src,rw \
    pip install --no-cache-dir /src

RUN groupadd --system --gid 10001 cxg \
    && useradd --system --uid 10001 --gid cxg --create-home --home-dir /home/cxg --shell /usr/sbin/nologin cxg

USER cxg
WORKDIR /home/cxg
EXPOSE 8080

# GET $CXG_HEALTH_URL answers 2xx: the gateway's liveness by default (a role on another port sets
# it); with CXG_HEALTH_NODES, the URL is a gateway's /readyz and that many nodes have joined.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import json, os, urllib.request; reply = urllib.request.urlopen(os.environ['CXG_HEALTH_URL'], timeout=4); nodes = os.environ.get('CXG_HEALTH_NODES'); raise SystemExit(nodes is not None and json.load(reply)['nodes'] < int(nodes))"]

ENTRYPOINT ["cxg"]
CMD ["--set", "gateway.host=0.0.0.0", "gateway"]
