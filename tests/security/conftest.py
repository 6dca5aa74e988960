"""Engine-backed sandbox fixtures for the confinement tests (defined in tests/docker)."""

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
