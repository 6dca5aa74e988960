"""The conformance suite's fixtures: ``sandbox`` made by each adapter of the harness
(``harness.py``, which says how to add a backend), on the engine fixtures of tests/docker."""

from tests.conformance.harness import adapter, sandbox  # noqa: F401 - fixtures, used by name
from tests.docker.cluster_rig import module_cluster
from tests.docker.node_plane import cluster_nodes  # noqa: F401 - the fixture, used by name
from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)

cluster = module_cluster(nodes=1)  # only the cluster-node adapter brings it up
