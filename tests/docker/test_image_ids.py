"""An image ref's id is reused briefly, yet the digest recorded is the one that ran, a rebuilt
image is picked up after the TTL, and a removed one is resolved again at once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import docker
import pytest

from runtime.sandbox.docker_backend import DockerBackend, DockerBackendConfig
from tests.docker.sandbox_fixtures import RunFn

pytestmark = pytest.mark.docker


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    return backend_config.model_copy(update={"image_id_ttl_s": 300.0})


@pytest.fixture
def ref(docker_api: docker.APIClient, sandbox_image: str) -> Iterator[str]:
    """A tag of our own (removed at the end) and a way to point it at a new image id."""
    repo = f"navi-test/image-ids-{uuid.uuid4().hex[:8]}"
    yield repo + ":1"
    for image in docker_api.images(name=repo):
        docker_api.remove_image(image["Id"], force=True)


def rebuild(api: docker.APIClient, base: str, ref: str, generation: int) -> str:
    """A new image id for ``ref``: ``base`` committed with a label of its own."""
    container = api.create_container(base, command=["true"], labels={"navi.test": "image-ids"})
    try:
        repo, tag = ref.rsplit(":", 1)
        return str(api.commit(container["Id"], repository=repo, tag=tag,
                              conf={"Labels": {"navi.test.generation": str(generation)}})["Id"])
    finally:
        api.remove_container(container["Id"], force=True)


async def test_a_removed_image_is_resolved_again(
    backend: DockerBackend, run: RunFn, docker_api: docker.APIClient, sandbox_image: str,
    ref: str,
) -> None:
    first = rebuild(docker_api, sandbox_image, ref, 1)
    assert (await run(["true"], image=ref)).image_digest == first
    second = rebuild(docker_api, sandbox_image, ref, 2)
    assert (await run(["true"], image=ref)).image_digest == first, "within the TTL: cached id"
    docker_api.remove_image(first, force=True)
    result = await run(["true"], image=ref)
    assert result.exit_code == 0 and result.image_digest == second


async def test_ttl_zero_inspects_every_call(
    backend: DockerBackend, run: RunFn, docker_api: docker.APIClient, sandbox_image: str,
    ref: str,
) -> None:
    backend.config = backend.config.model_copy(update={"image_id_ttl_s": 0.0})
    first = rebuild(docker_api, sandbox_image, ref, 1)
    assert (await run(["true"], image=ref)).image_digest == first
    second = rebuild(docker_api, sandbox_image, ref, 2)
    assert (await run(["true"], image=ref)).image_digest == second
