#!/usr/bin/env bash
# Build the rocketmesh image where no container registry (and no PyPI from inside `docker build`) is
# reachable. Elsewhere a plain `docker compose build` (or `docker build -t rocketmesh:latest .`) is all
# it takes; this script only supplies what the registry would have:
#
#   1. the base image python:3.11-slim: when it is not in the engine already, it is made from Debian's
#      packages with debootstrap (bookworm: python3 3.11 at /usr/bin/python3) and tagged python:3.11-slim,
#      so the Dockerfile keeps its standard FROM. The rootfs tarball is cached in .cache/docker/.
#   2. the wheels of rocketmesh and the services' dependencies (its server and dashboard extras), built on
#      the host (`pip wheel`) into .cache/wheels/ (and, with --spark, those of the spark extra); the
#      Dockerfile installs them with --no-index --find-links.
#   3. docker build (the runtime image rocketmesh:latest, and with --spark the spark target too).
#
# usage: docker/build-image.sh [--spark] [--image NAME]     (run from anywhere; needs a running engine)
# env:   DEBIAN_MIRROR (default: the mirror apt uses here, else deb.debian.org), ROCKETMESH_CACHE_DIR (where
#        the base rootfs tarball is kept, default .cache; the wheels stay in .cache/wheels, inside the build context)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${ROCKETMESH_CACHE_DIR:-$ROOT/.cache}"
IMAGE=rocketmesh:latest
SPARK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --spark) SPARK=1 ;;
    --image) IMAGE="$2"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
BASE=python:3.11-slim
BASE_TAR="$CACHE/docker/bookworm-python3-rootfs.tar"
WHEELS="$ROOT/.cache/wheels"  # in the build context: the Dockerfile's COPY takes them from there
log() { echo "[build-image $(date +%T)] $*" >&2; }

# --- 1. base image ----------------------------------------------------------------------------------
if docker image inspect "$BASE" >/dev/null 2>&1; then
  log "base image $BASE is in the engine"
else
  if [ ! -s "$BASE_TAR" ]; then
    mirror="${DEBIAN_MIRROR:-$(grep -rhoE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
              | grep -oE 'https?://[^ ]+' | head -n1 || true)}"
    mirror="${mirror:-http://deb.debian.org/debian}"
    command -v debootstrap >/dev/null || { echo "build-image.sh: $BASE is not in the engine and debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
    mkdir -p "$CACHE/docker"
    rootfs="$(mktemp -d /tmp/rocketmesh-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    log "making $BASE from Debian bookworm with debootstrap ($mirror) ..."
    # python3-cffi-backend must be listed, or debootstrap fails resolving python3-pip's dependencies.
    debootstrap --variant=minbase \
      --include=python3,python3-venv,python3-pip,python3-zmq,python3-cffi-backend,ca-certificates \
      bookworm "$rootfs" "$mirror" >"$CACHE/docker/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/docker/debootstrap.log" >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    mkdir -p "$(dirname "$BASE_TAR")"
    tar -C "$rootfs" -cf "$BASE_TAR.tmp" . && mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$rootfs"; trap - EXIT
  fi
  log "importing $BASE_TAR as $BASE"
  docker import -c 'CMD ["python3"]' "$BASE_TAR" local/bookworm-python:base >/dev/null
  docker tag local/bookworm-python:base "$BASE"
fi

# --- 2. wheels ----------------------------------------------------------------------------------------
mkdir -p "$WHEELS"
rm -f "$WHEELS"/rocketmesh-*.whl   # always this tree's code; the dependencies' wheels stay cached
target="$ROOT[server,dashboard]"; [ "$SPARK" = 1 ] && target="$ROOT[server,dashboard,spark]"
log "building wheels into $WHEELS"
# One fixed date for the files in the wheel (SOURCE_DATE_EPOCH) and for the wheel itself (docker build's cache
# looks at its mtime): unchanged code gives the same wheel, docker build reuses its layers and the image keeps
# its id, so `up -d` after a rebuild recreates no container (a build for --spark next to a running mesh would
# otherwise restart every service of it).
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-315532800}"
python3 -m pip wheel -q --find-links "$WHEELS" -w "$WHEELS" "$target"
touch -d "@$SOURCE_DATE_EPOCH" "$WHEELS"/rocketmesh-*.whl

# --- 3. docker build ----------------------------------------------------------------------------------
# The build stages are tagged too (NAME-build:cache, NAME-spark-build:cache): untagged, the prune below would
# delete them, and with them docker build's cache, so that every build made a new image.
log "docker build -t $IMAGE"
docker build -q --build-arg WHEELS=.cache/wheels --target build -t "${IMAGE%%:*}-build:cache" "$ROOT" >/dev/null
docker build -q --build-arg WHEELS=.cache/wheels --target runtime -t "$IMAGE" "$ROOT" >/dev/null
if [ "$SPARK" = 1 ]; then
  log "docker build -t ${IMAGE%%:*}-spark:latest (target spark)"
  docker build -q --build-arg WHEELS=.cache/wheels --target spark-build -t "${IMAGE%%:*}-spark-build:cache" "$ROOT" >/dev/null
  docker build -q --build-arg WHEELS=.cache/wheels --target spark -t "${IMAGE%%:*}-spark:latest" "$ROOT" >/dev/null
fi
# The images the new ones replaced, untagged now (only this Dockerfile's: by label).
docker image prune -f --filter label=rocketmesh.image=1 >/dev/null
log "done: $IMAGE"
