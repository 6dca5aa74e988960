#!/usr/bin/env bash
# Builds the supervisor image (navi/supervisor:latest) offline, for docker-compose.yml:
#   1. the Python dependencies as wheels in .build/supervisor-wheels (pip, on the host: PyPI)
#   2. `docker build --network none` of ./Dockerfile on an offline base: navi/python:latest
#      (made by `navi images build`), or BASE=debian:bookworm-slim on a host with a registry.
# Nothing inside the build reaches a network; a second run reuses the wheels.
#
# Environment: BASE (base image), TAG (default navi/supervisor:latest), PIP (default .venv/bin/pip)
set -euo pipefail

cd "$(dirname "$0")/.."
BASE="${BASE:-navi/python:latest}"
TAG="${TAG:-navi/supervisor:latest}"
PIP="${PIP:-.venv/bin/pip}"
WHEELS=.build/supervisor-wheels

say() { printf '==> %s\n' "$*" >&2; }

case "$(uname -m)" in
    x86_64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) echo "supervisor_image: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac

# The runtime's own dependencies, read from pyproject.toml (the image runs the source tree;
# navi-client is in it too, clients/python/navi_client, copied by the Dockerfile).
mapfile -t deps < <("${PIP%/pip}/python" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as fh:
    deps = tomllib.load(fh)["project"]["dependencies"]
print("\n".join(d for d in deps if not d.startswith("navi-client")))
PY
)

say "wheels for ${#deps[@]} dependencies (CPython 3.11, $arch) -> $WHEELS"
mkdir -p "$WHEELS"
printf '%s\n' "${deps[@]}" > "$WHEELS/requirements.txt"
"$PIP" download -q --dest "$WHEELS" --only-binary=:all: --implementation cp \
    --python-version 3.11 --abi cp311 --abi abi3 --abi none \
    --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
    --platform "manylinux_2_28_$arch" --platform any "${deps[@]}"

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    echo "supervisor_image: base image $BASE is missing; run 'navi images build' first" \
         "(or BASE=debian:bookworm-slim on a host with a registry)" >&2
    exit 1
fi

# An offline base already has python3 and venv: the build needs no network at all.
network=none
case "$BASE" in navi/*) ;; *) network=default ;; esac
say "docker build --network $network --build-arg BASE=$BASE -t $TAG ."
docker build -q --network "$network" --build-arg "BASE=$BASE" -t "$TAG" . >/dev/null
say "built $TAG"
