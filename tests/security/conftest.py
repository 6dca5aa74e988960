"""Engine-backed sandbox fixtures for the security tests (defined in tests/docker), and the
conformance harness's ``sandbox`` for the confinement probes (one per adapter)."""

from tests.conformance.harness import adapter, sandbox  # noqa: F401 - fixtures, used by name
from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)
