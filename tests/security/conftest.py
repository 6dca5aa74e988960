"""Engine-backed sandbox fixtures for the security tests (defined in tests/docker), the
conformance harness's ``sandbox`` for the confinement probes (one per adapter), and the opened
tools of a data dir (``services``, from tests/fakes/tool_rigs)."""

from tests.conformance.harness import adapter, sandbox  # noqa: F401 - fixtures, used by name
from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)
from tests.docker.tool_rig import runner_image  # noqa: F401 - the fixture, used by name
from tests.fakes.tool_rigs import services  # noqa: F401 - the fixture, used by name
