#!/usr/bin/env bash
# Sets up everything `make run` and `make test` need, on a fresh Debian 12 machine too:
#   1. Debian packages: docker.io, mmdebstrap (and python3-venv) when missing (apt, as root)
#   2. the Docker engine: dockerd started detached when `docker info` fails; gVisor (Debian's
#      runsc) registered with it as runtime `runsc` when this script manages the engine
#   3. .venv with the project and its client (`pip install -e ./clients/python -e '.[dev]'`,
#      again only when either pyproject.toml changed)
#   4. the sandbox images, built offline (`navi images build`, skips up-to-date images)
# Every step checks first and does nothing when already done, so a second run takes seconds.
#
# Environment: NAVI_DATA_DIR (default ./data; dockerd.log goes there), PYTHON (default python3),
# IMAGES_BASE (e.g. debian:bookworm-slim: build the images on a registry base instead),
# DOCKERD_TIMEOUT (seconds to wait for the engine, default 60).
set -euo pipefail

cd "$(dirname "$0")/.."
DATA_DIR="${NAVI_DATA_DIR:-./data}"
PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.navi-pyproject.sha256"
DOCKERD_TIMEOUT="${DOCKERD_TIMEOUT:-60}"
started=$(date +%s)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'setup error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

install_system_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
    [ -z "${DOCKER_HOST:-}" ] && ! command -v runsc >/dev/null 2>&1 && missing+=(runsc)
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install python3 (>= 3.11)"
    "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
    if [ "${NAVI_SETUP_TEST_TOOLS:-0}" = 1 ]; then  # `make test`: real browser + compose checks
        command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-liberation)
        command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
        [ -x /usr/sbin/sshd ] || missing+=(openssh-server)  # ssh_exec's test runs its own sshd
    fi
    [ "${#missing[@]}" -eq 0 ] && return 0
    if [[ " ${missing[*]} " == *" openssh-server "* ]] && is_root; then
        install_sshd_binary_only
        local rest=() package
        for package in "${missing[@]}"; do
            [ "$package" = openssh-server ] || rest+=("$package")
        done
        [ "${#rest[@]}" -eq 0 ] && return 0
        missing=("${rest[@]}")
    fi
    if ! is_root; then
        die "missing: ${missing[*]}. Install as root, then run this again:
    apt-get update && apt-get install -y ${missing[*]}"
    fi
    say "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
}

# The tests start their own sshd on loopback; installing the package must not leave a system
# sshd listening on port 22: no service started (policy-rc.d) and, under systemd, none enabled.
install_sshd_binary_only() {
    say "installing openssh-server for the ssh_exec tests (its service neither started nor enabled)"
    export DEBIAN_FRONTEND=noninteractive
    local guard=/usr/sbin/policy-rc.d placed=0
    if [ ! -e "$guard" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$guard" && chmod 755 "$guard" && placed=1
    fi
    apt-get update -q
    apt-get install -y -q openssh-server || { [ "$placed" = 1 ] && rm -f "$guard"; die "apt-get failed"; }
    [ "$placed" = 1 ] && rm -f "$guard"
    if command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
    fi
}

engine_error() { docker version --format '{{.Server.Version}}' 2>&1 >/dev/null | head -n 2; }
engine_up() { docker info >/dev/null 2>&1; }

# The default dockerd's pidfile: a live pid there means "starting up, wait", not "start one".
dockerd_running() {
    local pid
    pid=$(cat /var/run/docker.pid 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

start_engine() {
    engine_up && return 0
    command -v docker >/dev/null 2>&1 || die "the docker client is missing: apt-get install docker.io"
    local log="$DATA_DIR/dockerd.log" started_pid=""
    if [ -n "${DOCKER_HOST:-}" ]; then
        die "DOCKER_HOST=$DOCKER_HOST does not answer: $(engine_error)"
    elif dockerd_running; then
        say "dockerd is already running; waiting for it to answer"
    elif ! is_root; then
        die "the Docker engine is not running and only root can start it ($(engine_error))"
    else
        mkdir -p "$DATA_DIR"
        say "starting dockerd (log: $log)"
        setsid nohup dockerd >>"$log" 2>&1 </dev/null &
        started_pid=$!
    fi
    local waited=0 problem=""
    until engine_up; do
        if [ -n "$started_pid" ] && ! kill -0 "$started_pid" 2>/dev/null && ! dockerd_running; then
            problem="dockerd exited"
        elif [ "$waited" -ge "$DOCKERD_TIMEOUT" ]; then
            problem="the Docker engine did not answer within $DOCKERD_TIMEOUT s"
        fi
        if [ -n "$problem" ]; then
            printf 'setup error: %s: %s\n' "$problem" "$(engine_error)" >&2
            if [ -f "$log" ]; then
                printf -- '--- last lines of %s ---\n' "$log" >&2
                tail -n 20 "$log" >&2
            fi
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "Docker engine is up (${waited} s)"
}

# gVisor: policies may run sandboxes under `limits.runtime: gvisor`. Without a network stack
# of its own (the sandbox's network is none anyway), enforcing the container's seccomp
# profile inside the sandbox too (--oci-seccomp), and allowed to connect to bind-mounted host
# sockets (the egress proxy's). SIGHUP makes dockerd reload its runtimes: no restart.
GVISOR_RUNTIME_ARGS='["--network=none", "--oci-seccomp", "--host-uds=open"]'
DAEMON_JSON=/etc/docker/daemon.json

gvisor_registered() {
    docker info --format '{{json .Runtimes.runsc}}' 2>/dev/null \
        | ARGS="$GVISOR_RUNTIME_ARGS" "$PYTHON" -c '
import json, os, sys
entry = json.loads(sys.stdin.read() or "null")
sys.exit(0 if entry and entry.get("runtimeArgs") == json.loads(os.environ["ARGS"]) else 1)'
}

register_gvisor() {
    gvisor_registered && return 0
    if [ -n "${DOCKER_HOST:-}" ] || ! is_root || ! dockerd_running || ! command -v runsc >/dev/null 2>&1; then
        say "gVisor is not registered with this engine: policies that ask for it are refused"
        printf '    to add it: apt-get install runsc, then put this in %s and reload dockerd:\n' "$DAEMON_JSON" >&2
        printf '    {"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": %s}}}\n' "$GVISOR_RUNTIME_ARGS" >&2
        return 0
    fi
    say "registering gVisor (runsc) with the engine in $DAEMON_JSON"
    mkdir -p "$(dirname "$DAEMON_JSON")"
    RUNSC="$(command -v runsc)" ARGS="$GVISOR_RUNTIME_ARGS" FILE="$DAEMON_JSON" "$PYTHON" - <<'PY'
import json, os
path = os.environ["FILE"]
try:
    with open(path) as fh:
        config = json.load(fh)
except FileNotFoundError:
    config = {}
config.setdefault("runtimes", {})["runsc"] = {
    "path": os.environ["RUNSC"], "runtimeArgs": json.loads(os.environ["ARGS"])}
with open(path + ".navi-tmp", "w") as fh:
    json.dump(config, fh, indent=2)
os.replace(path + ".navi-tmp", path)
PY
    kill -HUP "$(cat /var/run/docker.pid)"
    local waited=0
    until gvisor_registered; do
        [ "$waited" -ge 20 ] && die "dockerd did not pick up the runsc runtime from $DAEMON_JSON"
        sleep 0.5
        waited=$((waited + 1))
    done
}

install_venv() {
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$PYTHON is $("$PYTHON" --version 2>&1); Python >= 3.11 is needed (set PYTHON=...)"
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local want
    want=$(cat pyproject.toml clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ] || [ ! -x "$VENV/bin/navi" ]; then
        # the client (navi-client, clients/python/) first in the same pip run: the project
        # depends on it, and pip takes it from here, never from an index
        say "installing the project into $VENV (pip install -e ./clients/python -e '.[dev]')"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            -e ./clients/python -e '.[dev]'
        echo "$want" >"$STAMP"
    fi
}

build_images() {
    local args=(images build)
    [ -n "${IMAGES_BASE:-}" ] && args+=(--base "$IMAGES_BASE")
    "$VENV/bin/navi" "${args[@]}"
}

install_system_packages
start_engine
register_gvisor
install_venv
build_images
say "set-up done in $(( $(date +%s) - started )) s"
