"""Runtime tiers on the real engine: a call asks for its tier by `limits.runtime`, gets it,
and is refused (never run on another tier) when the engine does not have it."""

from __future__ import annotations

import uuid

import docker
import pytest

from runtime.errors import RuntimeUnavailable
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import warm_key
from runtime.sandbox.models import ExecRequest, Limits
from tests.docker.sandbox_fixtures import RunFn, py

pytestmark = pytest.mark.docker


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    """An engine on which gVisor is missing: its name maps to a runtime nobody registered."""
    missing = f"runsc-missing-{uuid.uuid4().hex[:8]}"
    return backend_config.model_copy(
        update={"engine_runtimes": {"runc": "runc", "gvisor": missing}})


async def test_a_missing_tier_is_refused_and_nothing_runs(
    run: RunFn, backend: DockerBackend, docker_api: docker.APIClient, test_instance_id: str,
) -> None:
    before = docker_api.containers(all=True, filters={"label": f"navi.instance={test_instance_id}"})
    with pytest.raises(RuntimeUnavailable) as refused:
        await run(py("print(1)"), limits=Limits(runtime="gvisor"))
    assert refused.value.code == "runtime_unavailable"
    assert "gvisor" in refused.value.message
    after = docker_api.containers(all=True, filters={"label": f"navi.instance={test_instance_id}"})
    assert len(after) == len(before)  # no container was made, on any runtime
    # runc calls are unaffected
    assert (await run(py("print(1)"))).stdout == b"1\n"


async def test_each_tier_gets_its_own_warm_class(backend: DockerBackend) -> None:
    """Warm containers are keyed by the whole spec, the runtime included."""
    keys = set()
    for tier in ("runc", "gvisor"):
        request = ExecRequest(image="sha256:" + "0" * 64, argv=["true"], exec_id="k",
                              limits=Limits(runtime=tier))  # type: ignore[arg-type]
        keys.add(warm_key(backend.shapes.spec(request, "sha256:" + "0" * 64)))
    assert len(keys) == 2
