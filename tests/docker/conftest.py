"""Engine-backed fixtures for tests/docker (defined in sandbox_fixtures, shared with security)."""

from tests.docker.sandbox_fixtures import (  # noqa: F401
    backend,
    backend_config,
    docker_api,
    run,
    sandbox_data_dir,
    sandbox_image,
    test_instance_id,
    workspace,
)
