"""`navi doctor`'s check of the cluster it is pointed at (`NAVI_CLUSTER`): the token file is
the owner's alone, the cluster takes it, and which execution nodes are alive.

Without `NAVI_CLUSTER` there is nothing to check and no line is printed (one machine).
"""

from __future__ import annotations

from runtime.cluster import link
from runtime.config import Settings
from runtime.errors import ClusterError
from runtime.sandbox.docker.selfcheck import Check


def cluster_checks(settings: Settings) -> list[Check]:
    if settings.cluster is None:
        return []
    token = link.token_file(settings.data_dir)
    try:
        link.connect(settings.cluster, token)
    except ClusterError as exc:
        return [Check("cluster", False, f"{settings.cluster}: {exc.message}")]
    try:
        nodes = link.nodes()
    finally:
        link.disconnect()
    alive = [n for n in nodes if n.alive]
    listed = ", ".join(f"{n.id} {'alive' if n.alive else 'dead'} ({n.address})"
                       for n in sorted(nodes, key=lambda n: n.id)) or "no execution nodes"
    return [Check("cluster", bool(alive),
                  f"{settings.cluster} (token {token}, 0600): {len(alive)} of {len(nodes)} "
                  f"nodes alive: {listed}")]
