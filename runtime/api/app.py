"""The app factory: settings in, a FastAPI app out; all state is built in its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from fastapi import FastAPI
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from runtime import __version__, tracing
from runtime.agent import AgentService
from runtime.agent.background import BackgroundAgents
from runtime.agent.recovery import close_interrupted_turns
from runtime.agent.reflect import Reflector
from runtime.agent.subagent import SubAgents
from runtime.api.access_log import AccessLog
from runtime.api.body_limit import BodyLimit
from runtime.api.bootstrap import ensure_admin
from runtime.api.data_disk import DataDiskGuard
from runtime.api.errors import install_error_handlers
from runtime.api.mcp import McpEndpoint
from runtime.api.published_origin import PublishedPages
from runtime.api.routes import (
    admin,
    approvals,
    audit,
    cluster,
    events,
    exec,
    files,
    health,
    sessions,
)
from runtime.api.routes import kernels as kernel_routes
from runtime.api.routes import messages as message_routes
from runtime.api.routes import ports as port_routes
from runtime.api.routes import processes as process_routes
from runtime.api.routes import profiles as profile_routes
from runtime.api.routes import questions as question_routes
from runtime.api.routes import (
    secrets as secret_routes,
)
from runtime.api.routes import shares as share_routes
from runtime.api.routes import snapshots as snapshot_routes
from runtime.api.routes import tools as tool_routes
from runtime.api.routes import web as web_routes
from runtime.api.services import Services
from runtime.audit.changes import ChangeLimiter
from runtime.audit.refusals import RefusalLimiter
from runtime.audit.store import AuditLog
from runtime.cluster.serving import cluster_plane, join_cluster
from runtime.config import Settings
from runtime.errors import NaviError
from runtime.events import EventHub, ReplayLimits
from runtime.executor import Executor
from runtime.kernels.service import for_app as kernel_service
from runtime.logging import get_logger
from runtime.metrics import Metrics
from runtime.nodes import LocalNode, NodeBackends, Nodes, NodeTable
from runtime.nodes.machine import Machine
from runtime.policy.engine import PolicyEngine
from runtime.policy.plan_mode import PlanModes
from runtime.ports.preview_rows import PreviewRows
from runtime.ports.service import PortsService, token_checker
from runtime.processes.outlog import tenant_log_bytes
from runtime.questions import QuestionBroker
from runtime.sandbox.backend import SandboxBackend
from runtime.sandbox.docker.images import image_ref
from runtime.sandbox.instance import load_instance_id
from runtime.sessions.profiles import SessionProfiles
from runtime.store import Store
from runtime.store.ids import TenantId
from runtime.store.secrets import SecretBox, SecretStore
from runtime.store.shares import ShareStore
from runtime.store.tenants import Tenants
from runtime.tools import build_tools
from runtime.tools.user.migrate import migrate_at_start
from runtime.tools.user.objects import objects_root, tenant_copy_bytes
from runtime.workspace.activity import call_on_loop

log = get_logger(__name__)


async def start_services(settings: Settings, backend: SandboxBackend | None = None) -> Services:
    """Open everything in dependency order; on failure close what was opened."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    policy = PolicyEngine.from_file(settings.policy)
    instance = load_instance_id(settings.data_dir)
    metrics = Metrics()
    opened: list[Callable[[], Awaitable[object]]] = []
    try:
        store = await Store.open(settings.database_path)
        opened.append(store.close)
        await ensure_admin(settings, store)
        audit = AuditLog(settings.data_dir, instance=instance,
                         on_append=metrics.audit_write.observe)
        await audit.open()
        opened.append(audit.close)
        await close_interrupted_turns(store)  # holding the audit lock: no other server
        tenants = Tenants(store, uid_base=settings.sandbox_uid_base,
                          host_passwd=settings.host_passwd)
        logs = settings.data_dir / "processes"  # background processes' output logs
        copies_root = objects_root(settings.data_dir)
        machine = Machine(  # as a node's
            settings, instance_id=instance, backend=backend,
            tenant_limit=_tenant_limit(policy, tenants),
            count_also=lambda tenant_id: (  # in the tenants' disk quotas
                tenant_copy_bytes(copies_root, tenant_id) + tenant_log_bytes(logs, tenant_id)))
        workspaces, backend = machine.workspaces, machine.backend
        await machine.open_disks()  # before the backend mounts anything
        opened.append(lambda: asyncio.to_thread(workspaces.close))
        opened.append(backend.close)
        table = NodeTable(LocalNode(workspaces, backend))  # a cluster adds its nodes
        plane = cluster_plane(settings, table, store)  # NAVI_CLUSTER (unset: None)
        nodes = Nodes(table, placement=plane)
        secrets = SecretStore(store, SecretBox.in_data_dir(settings.data_dir))
        executor = Executor(engine=policy, backend=NodeBackends(nodes), audit=audit,
                            resolve_image=lambda name: image_ref(name, settings),
                            secrets=secrets,
                            refusals=RefusalLimiter(burst=settings.refusal_burst,
                                                    rate=settings.refusal_rate),
                            changes=ChangeLimiter(burst=settings.change_burst,
                                                  rate=settings.change_rate))
        hub = EventHub(ReplayLimits.from_settings(settings))
        kernels = kernel_service(settings, executor, backend, workspaces)
        questions = QuestionBroker(hub, settings.question_timeout_s)
        plan_modes = PlanModes()
        subagents = SubAgents()  # bound to the services below, once they exist
        reflector = Reflector()
        tools = build_tools(settings.data_dir, policy=policy, executor=executor,
                            search_url=settings.search_url,
                            profiles=SessionProfiles(policy, store, executor, hub),
                            subagents=subagents, tenant_disk=workspaces,
                            shares=ShareStore(store), reviewer=reflector,
                            questions=questions, plan_modes=plan_modes,
                            kernels=kernels)
        copies = tools.user_tools.store
        await migrate_at_start(copies, audit)  # tenant tools a new built-in's name took
        await asyncio.to_thread(copies.collect_all)  # nothing runs yet: unreferenced go
        await tools.open()
        opened.append(tools.close)
        agent = AgentService.from_settings(settings)
        opened.append(agent.close)
    except BaseException:
        for close in reversed(opened):
            with contextlib.suppress(Exception):
                await close()
        raise
    services = Services(settings=settings, store=store, audit=audit, policy=policy,
                        backend=backend, executor=executor, tools=tools, tenants=tenants,
                        workspaces=workspaces, nodes=nodes, agent=agent,
                        metrics=metrics, hub=hub, secrets=secrets, questions=questions,
                        plan_modes=plan_modes,
                        kernels=kernels)
    subagents.services = services
    subagents.background = BackgroundAgents(subagents)  # spawn_agent {background: true}
    await subagents.background.recover()  # the last server's still running: interrupted
    services.processes.register_kind("agent", subagents.background)
    tools.processes.service = services.processes  # the process tools' service
    reflector.services = services
    await _start_ports(services)
    services.background.append(services.hub.start_sweeper())
    services.background += machine.start_idle_release()  # (runtime.workspace.activity)
    if kernels is not None:  # idle kernels saved to their session's disk and stopped
        kernels.token_ended = services.token_ended  # and ended with their token
        services.background.append(asyncio.create_task(kernels.sweep_idle()))
    adopted = await _start_sandbox(services, machine)
    try:
        await join_cluster(services, plane)  # NAVI_CLUSTER: execution nodes (unset: nothing)
    except BaseException:
        await services.close()
        raise
    await _adopt_on_nodes(services, links=adopted or plane is not None)
    return services


async def _adopt_on_nodes(services: Services, *, links: bool) -> None:
    """After a restart, the processes the cluster's nodes still run are adopted (or
    ended); then the kept preview links of every adopted process answer again."""
    try:
        await services.processes.adopt_on_nodes()
    except Exception as exc:  # their records stay running for the next start
        log.warning("node_process_adoption_failed", error=str(exc))
    if links and services.ports is not None:
        await services.ports.load_links()


def _tenant_limit(policy: PolicyEngine, tenants: Tenants) -> Callable[[str], int]:
    """A tenant's disk quota in bytes by its id, from a worker thread: what a session disk
    mounted again is admitted against."""
    loop = asyncio.get_running_loop()

    async def limit(tenant_id: str) -> int:
        quotas = policy.quotas(await tenants.name(TenantId(tenant_id)))
        return quotas.tenant_disk_mb * 1024 * 1024

    return lambda tenant_id: call_on_loop(loop, lambda: limit(tenant_id))


async def _start_ports(services: Services) -> None:
    """Session ports (the relay broker, the proxy) and the preview origin's listener."""
    settings = services.settings
    ports = PortsService(settings.data_dir / "ports", token_alive=token_checker(
        services.store.get_token), rows=PreviewRows(services.store))
    try:
        await ports.start(host=settings.host, api_port=settings.port,
                          preview_port=settings.preview_port, preview_url=settings.preview_url)
    except BaseException:
        await ports.close()
        await services.close()
        raise
    services.ports = ports
    ports.published = PublishedPages(services)  # published HTML, each on its own origin
    services.executor.recorder.for_call = ports.hub.for_call
    if services.kernels is not None:  # a kernel's relay follows the session's ports
        services.kernels.backend.ports = ports.hub.for_kernel
    processes = services.processes  # a process's ports: its relay, and gone with it
    processes.launch_hooks.append(ports.launch_hook)
    processes.on_end.append(ports.end_hook)


async def _start_sandbox(services: Services, machine: Machine) -> bool:
    """Connect the engine and sweep our leftovers; without an engine the API still serves.
    Whether the last server's processes here were adopted (their preview links are loaded
    once its nodes' are too: `_adopt_on_nodes`)."""
    adopted = False

    async def adopt() -> frozenset[str]:
        nonlocal adopted
        kept = await services.processes.adopt()  # live records keep their containers
        if services.ports is not None:  # their relays reconnect to the same sockets
            for live in list(services.processes.live.values()):
                await services.ports.adopt_hook(live.record, live.record.session_id)
        adopted = True
        return kept

    try:
        services.background += await machine.start_engine(adopt)
    except NaviError as exc:
        log.warning("sandbox_unavailable", code=exc.code, message=exc.message)
    return adopted


class Front(Protocol):
    """Another door into the same services, mounted beside the API at ``path`` (the E2B
    bridge: `runtime.server`). It stands above the API and imports it, never the reverse."""

    path: str

    def app(self, services: Callable[[], Services]) -> ASGIApp:
        """The ASGI app served under ``path``."""
        ...

    def start(self, services: Services) -> asyncio.Task[Any] | None:
        """Its background work, started once the services are (cancelled at close)."""
        ...


def create_app(settings: Settings | None = None, *, backend: SandboxBackend | None = None,
               fronts: Sequence[Front] = ()) -> FastAPI:
    """The control API; ``fronts`` are mounted beside it (`runtime.server.create_app` adds
    the E2B bridge: what ``navi serve`` runs)."""
    settings = settings or Settings()

    mcp = McpEndpoint(lambda: app.state.services)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tracing.setup(settings.otel_endpoint)
        try:
            services = await start_services(settings, backend)
        except BaseException:
            tracing.shutdown()
            raise
        app.state.services = services
        for front in fronts:
            task = front.start(services)
            if task is not None:
                services.background.append(task)
        log.info("ready", policy=str(settings.policy), data_dir=str(settings.data_dir))
        try:
            async with mcp.running():
                yield
        finally:
            await services.close()
            await asyncio.sleep(0)
            await asyncio.to_thread(tracing.shutdown)  # flushes what is queued

    app = FastAPI(
        title="Navi Runtime",
        version=__version__,
        description="Sandboxed, policy-governed, audited agent executions.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.add_middleware(BodyLimit)
    app.add_middleware(DataDiskGuard, data_dir=settings.data_dir)
    app.add_middleware(AccessLog)  # outermost of ours: sees every answer, logs after it
    for router in (health.router, admin.router, sessions.router, exec.router, files.router,
                   events.router, tool_routes.router, approvals.router, audit.router,
                   message_routes.router, secret_routes.router, share_routes.router,
                   profile_routes.router, snapshot_routes.router, cluster.router,
                   process_routes.router,
                   question_routes.router, kernel_routes.router):
        app.include_router(router)
    app.router.routes.append(Route("/mcp", endpoint=mcp, include_in_schema=False))
    for front in fronts:
        app.router.routes.append(Mount(front.path, app=front.app(lambda: app.state.services)))
    app.include_router(port_routes.router)
    app.include_router(web_routes.router)
    return app
