"""Engine-backed fixtures for tests/docker (defined in sandbox_fixtures and tool_rig, shared with
security)."""

from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)
from tests.docker.tool_rig import runner_image  # noqa: F401 - the fixture, used by name
