"""This test process as a cluster's control plane: joined to a local cluster with its token,
one `RemoteNode` per live node (`runtime.cluster.control.remote.agent_for`).

Ray caches its auth token when first imported; `runtime.cluster.link.connect` resets that
cache after setting the token, so a pytest process may join one cluster after another.
`cluster_nodes` is the module-scoped fixture over the module's `cluster`
(tests/docker/cluster_rig.module_cluster).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.docker.cluster_rig import Cluster

if TYPE_CHECKING:
    from runtime.cluster.control.remote import RemoteNode


@contextlib.contextmanager
def joined(cluster: Cluster, on_lost: Callable[[str], None] | None = None, *,
           disks: bool | None = None) -> Iterator[dict[str, RemoteNode]]:
    """`disks`: the agents' session disks (`agent_for`; None: when the node can). An agent
    is made once per node, so the first join of a cluster decides."""
    from runtime.cluster import link

    saved = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
    link.connect(cluster.address, cluster.token_file)  # sets the token, resets Ray's cache
    try:
        from runtime.cluster.control.remote import agent_for

        yield {n.id: agent_for(n.id, n.ray_id, on_lost=on_lost, disks=disks)
               for n in link.nodes() if n.alive}
    finally:
        link.disconnect()
        for key in [k for k in os.environ if k.startswith("RAY_")]:
            del os.environ[key]
        os.environ.update(saved)


@pytest.fixture(scope="module")
def cluster_nodes(cluster: Cluster) -> Iterator[dict[str, RemoteNode]]:
    with joined(cluster) as nodes:
        yield nodes


def plane_dir(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new control plane's directory, holding the cluster's token as `navi serve` reads it
    (`data/keys/cluster-token`, 0600)."""
    tmp = tmp_path_factory.mktemp("plane")
    keys = tmp / "data" / "keys"
    keys.mkdir(parents=True)
    shutil.copyfile(cluster.token_file, keys / "cluster-token")
    (keys / "cluster-token").chmod(0o600)
    return tmp


def user_client(url: str, token: str, timeout: float) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=timeout,
                        headers={"Authorization": f"Bearer {token}"})
