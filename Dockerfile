# One image for every rocketmesh service: `rocketmesh` is the entrypoint, the compose file's command
# picks the service (`namesrv ...`, `broker ...`, `scheduler ...`, `dashboard ...`, `health ...`). It
# installs `rocketmesh[server,dashboard]`: the SDK, the services' dependencies and the web console's; the
# spark image installs `rocketmesh[spark]`, the SDK and pyspark: a Spark job is a client of the mesh.
#
#   docker build -t rocketmesh:latest .            # with a registry and PyPI in reach
#   docker/build-image.sh                          # without: base image from debootstrap, wheels from the host
#   docker build --target spark -t rocketmesh-spark:latest .   # + Java and pyspark, for the spark profile
ARG BASE_IMAGE=python:3.11-slim

# --- build: a virtualenv with rocketmesh and its dependencies, from wheels --------------------------
FROM ${BASE_IMAGE} AS build
# The label lets docker/build-image.sh prune this Dockerfile's dangling images, and no others.
LABEL rocketmesh.image=1
# Prebuilt wheels (docker/build-image.sh: --build-arg WHEELS=.cache/wheels); the default is empty, and
# then the wheels are built here from PyPI.
ARG WHEELS=docker/wheels
ARG EXTRAS="[server,dashboard]"
COPY ${WHEELS}/ /wheels/
COPY pyproject.toml README.md LICENSE /src/
COPY libs /src/libs
COPY services /src/services
COPY spark /src/spark
RUN python3 -m venv /opt/rocketmesh \
 && if ls /wheels/rocketmesh-*.whl >/dev/null 2>&1; then \
        /opt/rocketmesh/bin/pip install --no-cache-dir --no-index --find-links /wheels "rocketmesh${EXTRAS}"; \
    else \
        /opt/rocketmesh/bin/pip wheel --no-cache-dir -w /wheels "/src${EXTRAS}" \
     && /opt/rocketmesh/bin/pip install --no-cache-dir --no-index --find-links /wheels "rocketmesh${EXTRAS}"; \
    fi

# --- base: the user and environment of both images -----------------------------------------------------
FROM ${BASE_IMAGE} AS base
LABEL rocketmesh.image=1
RUN groupadd --system --gid 10001 rocketmesh \
 && useradd --system --uid 10001 --gid rocketmesh --home-dir /home/rocketmesh --create-home rocketmesh \
 && mkdir -p /data && chown rocketmesh:rocketmesh /data
# ROCKETMESH_ADDRESS_FILE: a service writes where it serves there, so that `rocketmesh health SERVICE`
# (the compose health checks) finds it, a scaled replica on a free port too.
ENV PATH=/opt/rocketmesh/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    ROCKETMESH_LOG_LEVEL=INFO \
    ROCKETMESH_ADDRESS_FILE=/tmp/rocketmesh.addr

# --- runtime: the services ------------------------------------------------------------------------------
FROM base AS runtime
COPY --from=build /opt/rocketmesh /opt/rocketmesh
USER rocketmesh
# Broker stores live under /data: docker-compose.yml mounts a named volume there per broker.
WORKDIR /data
ENTRYPOINT ["rocketmesh"]
CMD ["--help"]

# --- spark: the SDK, pyspark and a JRE, for the compose file's spark profile (no server extra) ----------
FROM build AS spark-build
RUN rm -rf /opt/rocketmesh && python3 -m venv /opt/rocketmesh \
 && if ls /wheels/pyspark-*.whl >/dev/null 2>&1; then \
        /opt/rocketmesh/bin/pip install --no-cache-dir --no-index --find-links /wheels "rocketmesh[spark]"; \
    else \
        /opt/rocketmesh/bin/pip install --no-cache-dir --find-links /wheels "rocketmesh[spark]"; \
    fi

FROM base AS spark
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=spark-build /opt/rocketmesh /opt/rocketmesh
USER rocketmesh
WORKDIR /data
ENTRYPOINT ["python3", "-m"]
CMD ["rocketmesh.spark.jobs.merchant_totals", "--help"]
