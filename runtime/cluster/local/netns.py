"""Network namespaces and veth pairs for the local cluster's nodes, and the processes in them.

Addresses are link-local (169.254.0.0/16: never routed, meant for one link; the project's
rules keep tests off the private ranges 10/8, 172.16/12 and 192.168/16): slot K (one local
cluster) uses 169.254.(100+K).0/24 and node i (from 1) the /30 at .4(i-1) of it; the host end
is .1 of that /30, the node end .2. The only route added is, in a node's namespace, the head's
address over that node's own veth: nothing is routed anywhere else and no host firewall or
forwarding setting is touched. (169.254.169.254, the cloud metadata address, is never used:
slots stop at 163.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runtime.errors import ClusterError

NET_PREFIX = "169.254"
SLOT_OFFSET = 100  # slot K is 169.254.(100+K).0/24
NETNS_DIR = Path("/run/netns")
MAX_SLOTS = 64
MAX_NODES = 63


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def netns_name(slot: int, node: int) -> str:
    return f"navi-c{slot}-n{node}"


def veth_name(slot: int, node: int) -> str:
    return f"navic{slot}n{node}"


def addresses(slot: int, node: int) -> tuple[str, str]:
    """(host end, node end) of node's /30."""
    base = 4 * (node - 1)
    third = SLOT_OFFSET + slot
    return f"{NET_PREFIX}.{third}.{base + 1}", f"{NET_PREFIX}.{third}.{base + 2}"


def slot_in_use(slot: int) -> bool:
    prefix = f"navi-c{slot}-"
    names = os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else []
    veth = Path(f"/sys/class/net/{veth_name(slot, 1)}")
    return any(n.startswith(prefix) for n in names) or veth.exists()


def create_node_net(slot: int, node: int) -> None:
    """The node's namespace, its veth pair and addresses; the head reachable over it."""
    ns, veth = netns_name(slot, node), veth_name(slot, node)
    host_ip, node_ip = addresses(slot, node)
    head_ip = addresses(slot, 1)[0]
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("addr", "add", f"{host_ip}/30", "dev", veth)
    _ip("link", "set", veth, "up")
    _ip("-n", ns, "addr", "add", f"{node_ip}/30", "dev", "eth0")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "link", "set", "eth0", "up")
    if head_ip != host_ip:
        _ip("-n", ns, "route", "add", f"{head_ip}/32", "dev", "eth0", "src", node_ip)


def delete_node_net(ns: str, veth: str) -> None:
    if Path(f"/sys/class/net/{veth}").exists():
        _ip("link", "del", veth)
    if (NETNS_DIR / ns).exists():
        _ip("netns", "del", ns)


def netns_inode(ns: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / ns).st_ino
    except FileNotFoundError:
        return None


def pids_in_netns(inode: int) -> list[int]:
    """Every process whose network namespace is the one with this inode."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                found.append(int(entry))
        except OSError:
            continue
    return found
