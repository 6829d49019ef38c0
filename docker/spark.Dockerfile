# The Spark image: a standalone master or worker (`cxg spark master`, `cxg spark worker`) whose
# executors run the project's code (the ingest pipeline, the cxg data source) and so need it
# installed with pyarrow and the rest, under the same Python as the drivers (the gateway image).
# Build from the repository root: docker build -f docker/spark.Dockerfile -t cxg-spark:0.1.0 .

# The base images, pinned; a build may name others with --build-arg (a local base made from
# Debian's own packages, where no registry is reachable: docker/README.md).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG JRE_IMAGE=eclipse-temurin:17.0.17_10-jre-noble

FROM ${JRE_IMAGE} AS jre

FROM ${PYTHON_IMAGE}

# A worker's directory for its executors out of the installed package, which the user may not write.
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/java/openjdk/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    SPARK_WORKER_DIR=/home/cxg/spark/work \
    CXG_HEALTH_URL=http://127.0.0.1:8080/

COPY --from=jre /opt/java/openjdk /opt/java/openjdk

# The project with its pinned dependencies (pyspark among them); the sources are mounted.
RUN --mount=type=bind,target=/src,rw \
    pip install --no-cache-dir /src

RUN groupadd --system --gid 10001 cxg \
    && useradd --system --uid 10001 --gid cxg --create-home --home-dir /home/cxg --shell /usr/sbin/nologin cxg \
    && install -d -o cxg -g cxg /home/cxg/spark/work

USER cxg
WORKDIR /home/cxg
EXPOSE 7077 8080 8081

# The web UI of the master (8080); a worker's (8081) through CXG_HEALTH_URL.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import json, os, urllib.request; reply = urllib.request.urlopen(os.environ['CXG_HEALTH_URL'], timeout=4); nodes = os.environ.get('CXG_HEALTH_NODES'); raise SystemExit(nodes is not None and json.load(reply)['nodes'] < int(nodes))"]

ENTRYPOINT ["cxg"]
CMD ["spark", "master", "--port", "7077", "--webui-port", "8080"]
