"""The Ray processes of the local cluster: a head in the host's namespace, a node in each.

Token authentication is always on (RAY_AUTH_MODE=token, the token read from a 0600 file);
no dashboard runs and so no job-submission API. Every node carries the custom resource
`navi_node` (one: one node agent per node); the head carries none and no CPUs, so nothing
but the control plane's own driver runs there.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from runtime.cluster.link import NODE_LABEL, NODE_RESOURCE
from runtime.errors import ClusterError


def write_token(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32))


def ray_env(token_file: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file),
               RAY_USAGE_STATS_ENABLED="0")
    env.update(extra or {})
    return env


def _ray_bin() -> str:
    ray = Path(sys.executable).with_name("ray")
    if not ray.exists():
        raise ClusterError("ray is not installed: pip install 'navi-runtime[cluster]'")
    return str(ray)


def _run(argv: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ClusterError(f"{what} did not start: {' / '.join(tail)}")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:  # as Ray binds: a TIME_WAIT left by the last run is no bar
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def start_head(ip: str, port: int, slot: int, temp_dir: Path, token_file: Path) -> None:
    base = 20000 + 100 * slot
    busy = [p for p in (port, base + 1, base + 2) if not _port_free(p)]
    if busy:
        raise ClusterError(f"the Ray head's ports {busy} are taken on this machine")
    _run([_ray_bin(), "start", "--head", f"--node-ip-address={ip}", f"--port={port}",
          "--include-dashboard=false", "--disable-usage-stats", "--num-cpus=0",
          f"--temp-dir={temp_dir}",
          f"--node-manager-port={base + 1}", f"--object-manager-port={base + 2}",
          f"--min-worker-port={base + 10}", f"--max-worker-port={base + 99}"],
         ray_env(token_file, {"RAY_health_check_period_ms": "1000"}), "the Ray head")


def start_node(netns: str, node_id: str, ip: str, address: str, token_file: Path,
               socket: Path, num_cpus: int, engine_pid: int, data_dir: Path) -> None:
    """A Ray node in the namespace and in its engine's mount namespace (the node agent's
    loop mounts of session disks must be the ones its engine bind-mounts into containers);
    its workers see their own engine in DOCKER_HOST and their data dir in NAVI_DATA_DIR
    (a path in that mount namespace: `runtime.cluster.local.engines.start_engine` made it)."""
    resources = json.dumps({NODE_RESOURCE: 1})
    env = ray_env(token_file, {"DOCKER_HOST": f"unix://{socket}", "NAVI_NODE_ID": node_id,
                               "NAVI_DATA_DIR": str(data_dir)})
    _run(["nsenter", f"--net=/run/netns/{netns}", f"--mount=/proc/{engine_pid}/ns/mnt",
          _ray_bin(), "start", f"--address={address}",
          f"--node-ip-address={ip}", f"--resources={resources}", f"--num-cpus={num_cpus}",
          f"--labels={NODE_LABEL}={node_id}", "--disable-usage-stats"],
         env, f"the Ray node {node_id}")


def head_pids(temp_dir: Path, host_netns_inode: int) -> dict[str, int]:
    """The head's processes: in the host's namespace, started with our temp dir, and their
    children (the raylet's agents and workers)."""
    mine: set[int] = set()
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino != host_netns_inode:
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        if str(temp_dir).encode() in argv:
            mine.add(int(entry))
    grew = True
    while grew:
        children = {p for p, pp in parent.items() if pp in mine} - mine
        grew = bool(children)
        mine |= children
    found: dict[str, int] = {}
    for pid in sorted(mine):
        found[process_name(pid, found)] = pid
    return found


def _name(argv: list[bytes], pid: int, taken: dict[str, int]) -> str:
    """A short stable name for a process: raylet, gcs_server, log_monitor, dockerd, …"""
    words = [Path(a.decode(errors="replace")).name for a in argv if a]
    name = words[0] if words else str(pid)
    for w in words[:3]:
        if w.endswith(".py"):
            name = w[:-3]
            break
    if name.startswith("ray::") or name.startswith("python"):
        name = name.split()[0]
    if name in taken:
        name = f"{name}-{pid}"
    return name


def process_name(pid: int, taken: dict[str, int]) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return str(pid)
    return _name(argv, pid, taken)
