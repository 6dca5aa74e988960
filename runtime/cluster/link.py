"""The control plane's link to a Ray cluster: its token checked, the connection, its nodes.

Only this module imports `ray` on the control plane, and only when `NAVI_CLUSTER` is set
(one machine never loads it). The token is `<data_dir>/keys/cluster-token`: a file only its
owner may read (0600), else `navi serve` refuses to start, as it would with no token at all.
A cluster that refuses the token (or does not answer) is a `ClusterError` at start, never
a server that runs without its nodes.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import ClusterError

NAMESPACE = "navi"  # the control plane's and the node agents' Ray namespace
NODE_RESOURCE = "navi_node"  # what makes a Ray node a Navi node
NODE_LABEL = "navi-node"  # a node's Navi id (its Ray label); without one, its IP address


def token_file(data_dir: Path) -> Path:
    return data_dir / "keys" / "cluster-token"


def check_token(path: Path) -> None:
    """A regular file, not empty, that neither group nor others may read or write."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ClusterError(f"NAVI_CLUSTER is set but {path} does not exist: put the "
                           "cluster's token there (0600)") from None
    if not stat.S_ISREG(info.st_mode):
        raise ClusterError(f"{path} is not a regular file")
    if info.st_mode & 0o077:
        raise ClusterError(f"{path} is readable or writable by others "
                           f"({stat.S_IMODE(info.st_mode):o}): chmod 600 it")
    if info.st_size == 0:
        raise ClusterError(f"{path} is empty")


@dataclass(frozen=True)
class RayNode:
    """One execution node as Ray sees it (dead ones included, once per Navi node id)."""

    id: str
    address: str
    ray_id: str
    alive: bool


def connect(address: str, token: Path) -> None:
    """Join the cluster as a driver with the token (blocking: call it in a thread)."""
    check_token(token)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                      RAY_USAGE_STATS_ENABLED="0")
    os.environ.pop("RAY_AUTH_TOKEN", None)  # the file, never a token from the environment
    import ray
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    # Ray reads its auth settings and token once (at first import or use) and caches
    # them: read them again, so a process that imported Ray earlier still uses this token
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()

    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR,
                 log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(
            f"could not join the Ray cluster at {address}: refused or not answering "
            f"(is {token} the cluster's token?): {exc}") from None


def disconnect() -> None:
    import ray

    ray.shutdown()


def nodes() -> list[RayNode]:
    """The cluster's execution nodes: those started with the resource `navi_node`, by their
    label `navi-node` (else their address). A node that died and came back shows once,
    alive; a dead entry keeps its label but loses its resources."""
    import ray

    return pick(ray.nodes())  # type: ignore[no-untyped-call]


def pick(raws: list[dict[str, Any]]) -> list[RayNode]:
    """`nodes()` from what `ray.nodes()` answered."""
    seen: dict[str, RayNode] = {}
    for raw in raws:
        node = _execution_node(raw)
        if node is None:
            continue
        known = seen.get(node.id)
        if known is None or (node.alive and not known.alive):
            seen[node.id] = node
    return list(seen.values())


def _execution_node(raw: dict[str, Any]) -> RayNode | None:
    labels = raw.get("Labels") or {}
    alive = bool(raw.get("Alive"))
    if NODE_RESOURCE not in (raw.get("Resources") or {}) and (alive or NODE_LABEL not in labels):
        return None  # the head, or a node not meant to run sandboxes
    address = str(raw.get("NodeManagerAddress", ""))
    return RayNode(id=str(labels.get(NODE_LABEL) or address), address=address,
                   ray_id=str(raw.get("NodeID", "")), alive=alive)
