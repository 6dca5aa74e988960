"""Engine-backed sandbox fixtures for the security tests (defined in tests/docker), the
conformance harness's ``sandbox`` for the confinement probes (one per adapter), and the opened
tools of a data dir (``services``, from tests/fakes/tool_rigs).

The cluster-node adapter's cluster (one per module, up only when that adapter runs) has its
agent made with ``disks=False``: workspaces are plain directories in the node's storage, which
this host reaches under the cluster's directory (the node itself sees it only in its own mount
namespace), so a probe can plant a file (a setuid binary owned by root) from this host. The
node's engine, its seccomp profile, flags and mounts are the real ones; the loop-mounted disk
is not (its options are checked in tests/docker/test_node_agent.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.conformance.harness import adapter, sandbox  # noqa: F401 - fixtures, used by name
from tests.docker.cluster_rig import Cluster, own_cluster
from tests.docker.node_plane import joined
from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)
from tests.docker.tool_rig import runner_image  # noqa: F401 - the fixture, used by name
from tests.fakes.tool_rigs import services  # noqa: F401 - the fixture, used by name

if TYPE_CHECKING:
    from runtime.cluster.control.remote import RemoteNode  # imports Ray: only where a node is used

cluster = own_cluster(nodes=1)  # only the cluster-node adapter brings it up (its agents:
# no session disks, so not the run's shared cluster, whose agents have them)


@pytest.fixture(scope="module")
def cluster_nodes(cluster: Cluster) -> Iterator[dict[str, RemoteNode]]:
    with joined(cluster, disks=False) as nodes:
        yield nodes
