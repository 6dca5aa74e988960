"""One Docker engine per node, inside the node's network namespace, and its images.

`ip netns exec` gives the engine a mount namespace of its own with a fresh /sys, which hides
the cgroup hierarchies: they are mounted again there (only there; the mounts end with the
namespace). The node's data directory is there too, and only there: `NODE_DATA`
(`/var/lib/navi-node`, an empty directory on the host) is a bind of the node's storage in
that namespace; the node agent runs in this namespace and keeps everything under it, so no path it
knows exists for the control plane, and a host path leaked across the hop fails here as it
would across machines. The engine never touches the host's networking (`--bridge=none
--iptables=false`) and has its own data-root, exec-root, pidfile and socket. Images come
from the host engine by `docker save | docker load`: nothing is pulled.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from runtime.errors import ClusterError

NODE_DATA = Path("/var/lib/navi-node")  # the node's data dir, in its mount namespace only

# The node's data dir bound over NODE_DATA (in this namespace only: `ip netns exec` made it
# a slave of the host's), then remount what the host has under /sys/fs/cgroup (v1
# hierarchies, the unified one), then exec.
_CGROUP_SETUP = r"""
set -e
mkdir -p /var/lib/navi-node
mount --bind "$NAVI_NODE_STORAGE" /var/lib/navi-node
mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
while read -r _ dir fstype opts _; do
  case "$dir" in /sys/fs/cgroup/*) ;; *) continue ;; esac
  mkdir -p "$dir"
  if [ "$fstype" = cgroup2 ]; then mount -t cgroup2 cgroup2 "$dir"
  else mount -t cgroup -o "$(echo "$opts" | tr , '\n' | grep -v -e '^rw$' -e '^relatime$' \
    | paste -sd,)" cgroup "$dir"; fi
done < /host-mounts
exec "$@"
"""


def start_engine(netns: str, run_dir: Path, data_root: Path, socket: Path,
                 storage: Path) -> int:
    """Start the node's dockerd; returns its pid once the socket answers. `storage`: what
    the node sees as its data dir (`NODE_DATA`, in the engine's mount namespace only)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    storage.mkdir(mode=0o700, parents=True, exist_ok=True)
    mounts = run_dir / "host-mounts"
    mounts.write_text(Path("/proc/self/mounts").read_text())
    script = _CGROUP_SETUP.replace("/host-mounts", str(mounts))
    pidfile = run_dir / "docker.pid"
    log = (run_dir / "dockerd.log").open("ab")
    subprocess.Popen(
        ["ip", "netns", "exec", netns, "sh", "-c", script, "navi-engine",
         "dockerd", f"--data-root={data_root}", f"--exec-root={run_dir / 'exec'}",
         f"--pidfile={pidfile}", f"--host=unix://{socket}", "--bridge=none",
         "--iptables=false", "--ip-masq=false", "--userland-proxy=false"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        env={**os.environ, "NAVI_NODE_STORAGE": str(storage)},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if socket.exists() and pidfile.exists() and _docker(socket, "version").returncode == 0:
            return int(pidfile.read_text().strip())
        time.sleep(0.2)
    raise ClusterError(f"the engine in {netns} did not start; see {run_dir / 'dockerd.log'}")


def _docker(socket: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["docker", "-H", f"unix://{socket}", *args], capture_output=True, timeout=timeout
    )


def host_images(patterns: list[str]) -> list[str]:
    """The host engine's images matching the patterns (e.g. `navi/*:latest`)."""
    found: list[str] = []
    for pattern in patterns:
        done = subprocess.run(
            ["docker", "images", "--filter", f"reference={pattern}",
             "--format", "{{.Repository}}:{{.Tag}}"],
            capture_output=True, text=True, timeout=60,
        )
        if done.returncode != 0:
            raise ClusterError(f"the host engine did not list images: {done.stderr.strip()}")
        found += [line for line in done.stdout.split() if line not in found]
    if not found:
        raise ClusterError(f"no host image matches {' '.join(patterns)} (navi images build)")
    return found


def save_images(images: list[str], tar: Path) -> None:
    done = subprocess.run(["docker", "save", "-o", str(tar), *images],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise ClusterError(f"docker save failed: {done.stderr.strip()}")


def load_images(socket: Path, tar: Path) -> None:
    done = _docker(socket, "load", "-q", "-i", str(tar), timeout=900)
    if done.returncode != 0:
        raise ClusterError(f"docker load into {socket} failed: {done.stderr.decode().strip()}")


def containerd_pid(run_dir: Path) -> int | None:
    pidfile = run_dir / "exec" / "containerd" / "containerd.pid"
    try:
        return int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
