"""The conformance harness: each ``SandboxBackend`` is one adapter, and every check runs on it.

After inspect_ai's sandbox ``self_check``, where a provider hands the suite a factory: an
``Adapter`` is a factory (an async context manager that yields a ready ``Sandbox``: a started
backend, its image and workspace, and how one call is driven) and the backend's
``Capabilities`` (does it run programs, keep the isolation promises, serve a call from a warm
container, under which runtime tier). Suites pick adapters by capability, never by type:

    tests/conformance/test_backend_contract.py   every adapter (a check that needs a real
                                                 program calls ``sandbox.needs(EXECUTE)``)
    tests/security/test_confinement.py           the adapters that can CONFINE

    fake                    FakeBackend: the protocol only, it runs nothing
    runc-cold, runc-warm    DockerBackend on runc, a fresh container / a warm one per call
    runc-pooled             a warm one from the tenant's pool, the session bound after start
                            (``late_bind.py``; primed by another session of the tenant)
    gvisor-cold, -warm      DockerBackend on gVisor's runsc
    cluster-node            a node agent of a real local cluster, through RemoteNode
                            (``runtime.cluster.control.remote``; the run's shared cluster, the
                            security probes' own 1-node one, whose agent has no session disks:
                            plain directories)

**Adding a backend** (the cluster node, a new engine or tier) is adding one adapter to
``ADAPTERS`` at the end of this module: its factory and its capabilities (``cannot`` names
what it can't do, and why). Every conformance check then runs on it, and the confinement
probes too unless it says it cannot CONFINE; nothing else changes. A suite takes adapters
with ``pytestmark = pytest.mark.parametrize("adapter", adapter_params(...))`` and the
``sandbox`` fixture (import ``adapter`` and ``sandbox`` into its conftest).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtime.sandbox.backend import OutputCallback, SandboxBackend
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import ExecRequest, ExecResult, Limits
from tests.docker.sandbox_fixtures import engine_config, new_workspace, started_backend
from tests.docker.warm_fixtures import wait_ready

EXECUTE = "execute"  # runs the program it is given: output, exit codes and limits are real
CONFINE = "confine"  # keeps the isolation promises (docs/sandbox.md): confinement probes run
PROTOCOL = "protocol"  # a `SandboxBackend` (results, streaming, kill, the start gate): the
# contract suite runs; a background process's container is not one, only confined like one


@dataclass(frozen=True)
class Capabilities:
    runtime: str | None = None  # the tier a call asks for (``limits.runtime``); None: as is
    warm: bool = False  # every call is served by a warm container (asserted per call)
    cannot: Mapping[str, str] = field(default_factory=dict)  # capability -> why not

    def can(self, capability: str) -> bool:
        return capability not in self.cannot


# One call: the request, its output callback, its start gate, and the scripted answer a
# backend that runs nothing plays instead (ignored by one that runs the program).
Driver = Callable[
    [ExecRequest, OutputCallback | None, Awaitable[object] | None, FakeResponse | None],
    Awaitable[ExecResult],
]


@dataclass
class Sandbox:
    """A ready backend as the checks see it: calls go through ``run``."""

    backend: SandboxBackend
    caps: Capabilities
    image: str
    workspace: Path | None
    drive: Driver
    tenant: str = "conformance"
    session: str | None = None  # None: the workspace's name

    @property
    def executes(self) -> bool:
        return self.caps.can(EXECUTE)

    def needs(self, capability: str) -> None:
        """Skip the check, with the adapter's reason, where this backend cannot do it."""
        if not self.caps.can(capability):
            pytest.skip(self.caps.cannot[capability])

    def request(self, argv: list[str], **fields: Any) -> ExecRequest:
        limits = fields.pop("limits", None) or Limits(timeout_s=30)
        if self.caps.runtime is not None:
            limits = limits.model_copy(update={"runtime": self.caps.runtime})
        return ExecRequest(
            image=fields.pop("image", self.image), argv=argv,
            exec_id=fields.pop("exec_id", _exec_id()),
            workspace=fields.pop("workspace", self.workspace),
            session=fields.pop("session", self.session or (
                self.workspace.name if self.workspace else "fake")),
            tenant=self.tenant, limits=limits, **fields)

    async def run(self, argv: list[str], *, fake: FakeResponse | None = None,
                  on_output: OutputCallback | None = None,
                  before_start: Awaitable[object] | None = None, **fields: Any) -> ExecResult:
        """Run ``argv``; a backend that runs nothing plays ``fake`` instead (the engine's part
        of the contract is the program's behaviour, the protocol's part is what is checked)."""
        return await self.drive(self.request(argv, **fields), on_output, before_start, fake)


Factory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Sandbox]]


@dataclass(frozen=True)
class Adapter:
    id: str
    caps: Capabilities
    factory: Factory  # gets the test's fixtures (``getfixturevalue``) for what it needs
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _exec_id() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


# ---- the fake ---------------------------------------------------------------------------

FAKE = Capabilities(cannot={
    EXECUTE: "FakeBackend runs nothing: this behaviour is the engine's",
    CONFINE: "FakeBackend runs nothing: there is nothing to confine",
})


@contextlib.asynccontextmanager
async def _fake(fixtures: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    del fixtures  # needs no engine
    backend = FakeBackend()

    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        backend.push(scripted or FakeResponse())
        return await backend.run(call, on_output, before_start=before_start)

    yield Sandbox(backend, FAKE, image="fake:latest", workspace=None, drive=drive)



# ---- Docker, per runtime tier, cold or warm ---------------------------------------------


def _cold(backend: DockerBackend) -> Driver:
    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        return await backend.run(call, on_output, before_start=before_start)

    return drive


def _warm(backend: DockerBackend) -> Driver:
    """A first call of the same class makes the pool launch a container; the call then runs
    in it (asserted, so a check can never silently run cold)."""

    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        prime = call.model_copy(update={"argv": ["true"], "stdin": b"", "exec_id": _exec_id()})
        await backend.run(prime)
        await wait_ready(backend, call.session)
        taken = backend.warm.stats["taken"]
        result = await backend.run(call, on_output, before_start=before_start)
        assert backend.warm.stats["taken"] == taken + 1, "the call did not run warm"
        return result

    return drive


def _pooled(backend: DockerBackend, config: DockerBackendConfig) -> Driver:
    """Another session of the tenant makes the pool launch a container (no session's files
    in it); the call then takes it and gets its own session bound (asserted)."""

    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        other = new_workspace(config)
        prime = call.model_copy(update={"argv": ["true"], "stdin": b"", "exec_id": _exec_id(),
                                        "workspace": other, "session": other.name})
        await backend.run(prime)
        await wait_ready(backend, f"@{call.tenant}")
        taken = backend.warm.stats["taken"]
        result = await backend.run(call, on_output, before_start=before_start)
        assert backend.warm.stats["taken"] == taken + 1, "the call did not run pooled"
        return result

    return drive


def pooled() -> Adapter:
    caps = Capabilities(runtime="runc", warm=True)

    @contextlib.asynccontextmanager
    async def factory(fixtures: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
        instance_id = fixtures.getfixturevalue("test_instance_id")
        config = engine_config(fixtures.getfixturevalue("sandbox_data_dir"), instance_id)
        config = config.model_copy(update={"warm": WarmPoolConfig(size=1, late_bind=True)})
        api = fixtures.getfixturevalue("docker_api")
        async with started_backend(config, api, instance_id) as backend:
            yield Sandbox(backend, caps, image=fixtures.getfixturevalue("sandbox_image"),
                          workspace=new_workspace(config), drive=_pooled(backend, config))

    return Adapter("runc-pooled", caps, factory, marks=(pytest.mark.docker,))


def docker(runtime: str, *, warm: bool) -> Adapter:
    caps = Capabilities(runtime=runtime, warm=warm)

    @contextlib.asynccontextmanager
    async def factory(fixtures: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
        instance_id = fixtures.getfixturevalue("test_instance_id")
        config = engine_config(fixtures.getfixturevalue("sandbox_data_dir"), instance_id)
        if warm:
            config = config.model_copy(update={"warm": WarmPoolConfig(size=1)})
        api = fixtures.getfixturevalue("docker_api")
        async with started_backend(config, api, instance_id) as backend:
            yield Sandbox(backend, caps, image=fixtures.getfixturevalue("sandbox_image"),
                          workspace=new_workspace(config),
                          drive=_warm(backend) if warm else _cold(backend))

    return Adapter(f"{runtime}-{'warm' if warm else 'cold'}", caps, factory,
                   marks=(pytest.mark.docker,))


# ---- a cluster node: the node agent on a local Ray cluster, through RemoteNode -----------

# The probes plant files in the workspace from this host, which does not see a node's session
# disk (mounted in the node's own mount namespace): tests/security/conftest.py joins its
# cluster with ``disks=False`` (plain directories in the node's storage, which this host
# reaches under the cluster's directory). Contract checks keep disks. The Sandbox's workspace
# is that storage path (to plant files); a call names the session's workspace instead
# (`RemoteNode.verify`), as every call to a node does: the node resolves it.
CLUSTER_NODE = Capabilities(runtime="runc")


@contextlib.asynccontextmanager
async def _cluster_node(fixtures: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    from runtime.store.ids import new_session_id, new_tenant_id
    from tests.docker.cluster_rig import IMAGE

    node = next(iter(fixtures.getfixturevalue("cluster_nodes").values()))
    cluster = fixtures.getfixturevalue("cluster")
    tenant, session = new_tenant_id(), new_session_id()
    await asyncio.to_thread(node.create, tenant, session)
    data_root = next(n["data_root"] for n in cluster.state["nodes"] if n["id"] == node.id)
    planted = Path(data_root).parent / "navi" / "workspaces" / tenant / session / "workspace"

    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        named: dict[str, object] = {"node": node.id}
        if call.workspace is not None:
            named["workspace"] = node.verify(tenant, session)  # a name the node resolves
        result: ExecResult = await node.backend.run(call.model_copy(update=named),
                                                    on_output, before_start=before_start)
        return result

    try:
        yield Sandbox(node.backend, CLUSTER_NODE, image=IMAGE, workspace=planted, drive=drive,
                      tenant=tenant, session=session)
    finally:
        await asyncio.to_thread(node.remove, tenant, session)


# ---- a background process's own container (runtime.processes) ---------------------------


def process(runtime: str) -> Adapter:
    """The container a background process gets (``ProcessContainers``: the call's spec,
    detached, stdin kept open, a lifetime lease), driven to its exit: the probes' program is
    the process. It keeps every isolation promise a call's container keeps."""
    caps = Capabilities(runtime=runtime, cannot={
        PROTOCOL: "a process container is not a SandboxBackend call (no streaming, caps, "
                  "kill or start gate here: runtime.processes has its own tests)"})

    @contextlib.asynccontextmanager
    async def factory(fixtures: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
        from tests.docker.process_driver import process_driver

        instance_id = fixtures.getfixturevalue("test_instance_id")
        config = engine_config(fixtures.getfixturevalue("sandbox_data_dir"), instance_id)
        api = fixtures.getfixturevalue("docker_api")
        async with started_backend(config, api, instance_id) as backend:
            yield Sandbox(backend, caps, image=fixtures.getfixturevalue("sandbox_image"),
                          workspace=new_workspace(config), drive=process_driver(backend))

    return Adapter(f"{runtime}-process", caps, factory, marks=(pytest.mark.docker,))


# ---- every backend: add a new one here --------------------------------------------------

ADAPTERS: tuple[Adapter, ...] = (
    Adapter("fake", FAKE, _fake),
    *(docker(runtime, warm=warm) for runtime in ("runc", "gvisor") for warm in (False, True)),
    pooled(),
    Adapter("cluster-node", CLUSTER_NODE, _cluster_node, marks=(pytest.mark.docker,)),
    *(process(runtime) for runtime in ("runc", "gvisor")),
)


def adapter_params(*needs: str) -> list[Any]:
    """``adapter`` parameters: each adapter that can do all of ``needs``, by its id."""
    return [pytest.param(a, id=a.id, marks=a.marks) for a in ADAPTERS
            if all(a.caps.can(need) for need in needs)]


@pytest.fixture
def adapter() -> Adapter:
    raise pytest.UsageError(
        'parametrize "adapter" with tests.conformance.harness.adapter_params(...)')


@pytest.fixture
async def sandbox(adapter: Adapter, request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    async with adapter.factory(request) as made:
        yield made
