"""Engine-backed fixtures for tests/docker (defined in sandbox_fixtures, shared with security)."""

from tests.docker.sandbox_fixtures import *  # noqa: F403 - the engine fixtures (its __all__)
