"""Engine fixtures the tenancy scenarios share with tests/docker."""

from tests.docker.sandbox_fixtures import docker_api, sandbox_image  # noqa: F401
