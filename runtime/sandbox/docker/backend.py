"""``DockerBackend``: every call in one fresh, hardened container, removed afterwards.

One call, in engine round trips: inspect the image (its id is what runs and what the audit
records) → create (``ContainerSpec``) → attach → start → [stream until EOF, or kill at the
deadline] → inspect (exit code, OOMKilled; ``wait`` only if the engine has not caught up) →
remove. Every step goes through ``DockerEngine`` (``engine.py``: the SDK is synchronous,
its steps run in the engine's thread pool, the two stream directions in threads of their
own, ``attach.py``); ``launch.py`` makes a call's container run (cold or warm) and
``drive.py`` streams it to its end.

Classified termination: a non-zero exit is a normal ``ExecResult`` ("your command failed");
``timed_out`` when we killed it at ``limits.timeout_s`` (counted from the call's start, so
the whole call takes at most timeout + kill + remove); ``oom_killed`` from the engine's
``State.OOMKilled``; ``truncated`` when a stream passed ``limits.output_bytes``. "The
sandbox broke" raises ``SandboxError`` / ``EngineUnavailable`` / ``ImageMissing``.
The container is removed on every path, cancellation included.

Warm path (``config.warm.size`` > 0; ``warm_pool.py``, ``launch.py``, ``warm_runner.py``,
``warm_stream.py``): a call whose class (the same ``ContainerSpec`` but argv) has a ready
container takes it, skipping create/attach/start: its job goes to the runner over stdin and
the call ends at the runner's end trailers. Each warm container serves one call and is
removed after it (off the call's path); after each call the session's next one is launched
in the background. ``release_session`` drops a session's, ``close`` all.

Egress (``request.network == "egress"``): the call gets its own ``runtime.egress`` proxy,
started before the container is created and closed when the call ends; its socket is mounted
into the container (the network stays ``none``) and the call always runs cold. The result
carries the proxy's report (``ExecResult.egress``).

``on_output`` gets each stream live up to ``limits.output_bytes`` (what an API client can
use); past the cap the result keeps head + tail and the artifact the whole stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from docker import APIClient

from runtime.config import Settings
from runtime.egress import egress_proxy
from runtime.egress.proxy import Resolver
from runtime.egress.rules import DeniedAddresses
from runtime.errors import RuntimeUnavailable, SandboxError
from runtime.logging import after_this_step, get_logger
from runtime.sandbox.backend import OutputCallback, StartGate
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend_config import DockerBackendConfig
from runtime.sandbox.docker.drive import Started, drive
from runtime.sandbox.docker.engine import DockerEngine
from runtime.sandbox.docker.hostmounts import HardenState, ensure_nosuid_nodev, release_nosuid_nodev
from runtime.sandbox.docker.late_bind import BindRoot, pooled_template
from runtime.sandbox.docker.launch import WarmLauncher, start_cold, start_warm
from runtime.sandbox.docker.reaper import Reaper
from runtime.sandbox.docker.seccomp import load_profile
from runtime.sandbox.docker.shapes import ContainerShapes, EngineFacts
from runtime.sandbox.docker.spec import LABEL_LEASE, LABEL_SESSION, ContainerSpec
from runtime.sandbox.docker.warm_pool import WarmContainer, WarmPool, warm_key
from runtime.sandbox.docker.warm_stream import oom_kills
from runtime.sandbox.instance import load_instance_id
from runtime.sandbox.models import ExecRequest, ExecResult

__all__ = ["DockerBackend", "DockerBackendConfig"]
log = get_logger(__name__)

SETTLE_WAIT_S = 5.0
"""The longest after-call work waits for the caller to settle a call (see ``run``)."""


class DockerBackend:
    """``SandboxBackend`` on a Docker engine. ``await start()`` (or the first ``run``) connects."""

    def __init__(self, config: DockerBackendConfig, *,
                 may_launch: Callable[[str, str], bool] = lambda t, s: True,
                 egress_denied: DeniedAddresses | None = None) -> None:
        """``may_launch(tenant, session)``: whether a warm container may be made for the
        session now (asked before each refill); ``egress_denied``: addresses no call's egress
        reaches (a cluster node: its machines)."""
        self.config = config
        self.engine = DockerEngine(config.base_url, config.max_threads)
        self.launcher = WarmLauncher(self.engine, config.warm, config.lease_grace_s)
        self.engine_facts = EngineFacts()  # filled in at start
        self.shapes = ContainerShapes(config, self.engine_facts)
        self._start_lock = asyncio.Lock()
        self._running: dict[str, str] = {}
        self.workspaces_root_state: HardenState | None = None
        self.warm = self._new_pool()
        self._removals: set[asyncio.Future[None]] = set()
        self._after: dict[str, set[asyncio.Future[None]]] = {}  # per session, of _removals
        self.egress_resolver: Resolver | None = None  # None: the host's resolver (tests set one)
        self.egress_denied = egress_denied
        self._runtimes: frozenset[str] = frozenset({"runc"})  # the engine's, read at start
        self.may_launch = may_launch

    @classmethod
    def from_settings(
        cls, settings: Settings, *, warm_pool: bool = False,
        may_launch: Callable[[str, str], bool] = lambda t, s: True,
        egress_denied: DeniedAddresses | None = None, **overrides: Any
    ) -> DockerBackend:
        return cls(DockerBackendConfig.from_settings(settings, warm_pool=warm_pool, **overrides),
                   may_launch=may_launch, egress_denied=egress_denied)

    def _new_pool(self) -> WarmPool:
        return WarmPool(self.config.warm, self.launcher.launch, self.launcher.discard)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, load the seccomp profile and the instance id, harden the workspaces root."""
        async with self._start_lock:
            if self.engine.connected:
                return
            facts = self.engine_facts
            facts.seccomp = load_profile(self.config.seccomp_profile_path)
            facts.instance = self.config.instance_id or load_instance_id(self.config.data_dir)
            if self.config.harden_workspaces_root:
                self.workspaces_root_state = ensure_nosuid_nodev(self.config.workspaces_root)
            await self.engine.connect()
            self._open_bind_root()
            info = await self.engine.call(self.engine.info)
            self._runtimes = frozenset(info.get("Runtimes") or {"runc": {}})
            facts.cgroup_driver = str(info.get("CgroupDriver") or "cgroupfs")
            facts.cpus = int(info.get("NCPU") or facts.cpus)
            log.info("docker_backend_started", instance=facts.instance,
                     runtimes=sorted(self._runtimes))

    @property
    def api(self) -> APIClient:
        return self.engine.api

    @property
    def instance_id(self) -> str:
        return self.engine_facts.instance_id  # SandboxError before start

    def reaper(self) -> Reaper:
        """A reaper for this backend's instance, sharing its client and threads."""
        return Reaper(self.api, self.instance_id, self.engine.threads)

    async def close(self) -> None:
        """Remove warm containers, kill what still runs (its call removes it), disconnect."""
        await self.warm.close()  # calls in flight hold this pool: they launch no more
        for exec_id in list(self._running):
            await self.kill(exec_id)
        patience = time.monotonic() + self.config.kill_grace_s + 5
        while self._running and time.monotonic() < patience:
            await asyncio.sleep(0.05)
        if self._removals:  # used warm containers of the calls that just ended
            await asyncio.wait(list(self._removals))
        for container in list(self._running.values()):  # wedged: the reaper's job otherwise
            await self.engine.call(self.engine.remove, container)
        self.engine.disconnect()  # a closed backend may be started again
        self.warm = self._new_pool()
        if self.launcher.bind_root is not None:
            self.launcher.bind_root.close()
            self.launcher.bind_root = None
        release_nosuid_nodev(self.config.workspaces_root, self.workspaces_root_state)
        self.workspaces_root_state = None

    def _open_bind_root(self) -> None:
        """Where pooled containers get their sessions bound (``late_bind.py``): runc session
        calls then share one pool per tenant class; without it, the session pool serves."""
        warm = self.config.warm
        if not (warm.late_bind and warm.size > 0 and BindRoot.possible()):
            return
        root = BindRoot(self.config.data_dir)
        try:
            root.open()
        except OSError as exc:
            log.warning("bind_root_unavailable", error=str(exc))
            return
        self.launcher.bind_root = root

    @property
    def runtimes(self) -> frozenset[str]:
        """OCI runtimes the engine offers (``runsc`` is gVisor)."""
        return self._runtimes

    async def _require_runtime(self, engine_name: str, tier: str) -> None:
        """Read the engine's runtimes again (one may have been registered since start);
        ``RuntimeUnavailable`` if it still lacks this one: never fall back to another."""
        self._runtimes = await self.engine.call(self.engine.runtimes)
        if engine_name not in self._runtimes:
            raise RuntimeUnavailable(
                f"the policy runs this call under {tier}, and the Docker engine has no "
                f"{engine_name!r} runtime; `make run` registers it, or see README "
                "(\"Runtime tiers\")", runtime=tier)

    # -- one call --------------------------------------------------------------------------

    async def kill(self, exec_id: str) -> None:
        container = self._running.get(exec_id)
        if container is not None:
            await self.engine.call(self.engine.kill_quietly, container)

    async def release_session(self, session: str) -> None:
        """Remove the session's warm containers, used ones included (a pooled one holds the
        session's disk bound until removed); its calls still running are not touched."""
        await self.warm.release_session(session)
        if pending := self._after.get(session):
            await asyncio.wait(list(pending))

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        if request.network == "egress":  # its proxy lives exactly as long as the call
            async with egress_proxy(request.egress_allowlist, self.config.egress,
                                    self.config.data_dir / "egress",
                                    exec_id=request.exec_id,
                                    resolver=self.egress_resolver,
                                    denied=self.egress_denied) as proxy:
                result = await self._run_call(request, on_output, proxy.socket_path,
                                              before_start, settled)
            return result.model_copy(update={"egress": proxy.report()})
        return await self._run_call(request, on_output, None, before_start, settled)

    async def _run_call(
        self, request: ExecRequest, on_output: OutputCallback | None, egress: Path | None,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        await self.start()
        began = time.monotonic()
        deadline = began + request.limits.timeout_s
        bound = log.bind(exec_id=request.exec_id, tenant=request.tenant, session=request.session)
        image_id = await self.engine.image_id_of(request.image)
        spec = self.shapes.spec(request, image_id, egress)
        if spec.runtime not in self._runtimes:
            await self._require_runtime(spec.runtime, request.limits.runtime)
        self.shapes.prepare_workspace(request)
        # warm ones are made without a socket, and no secret waits in an idle container
        cold = not self.warm.enabled or egress is not None or bool(request.env)
        template = spec if cold else self._warm_template(spec, request)
        key = None if cold else f"{warm_key(template)}:{request.limits.timeout_s}"
        pool = self.warm  # close() swaps it: this call settles with the one it took from
        warm = await self._take(pool, key, request) if key is not None else None
        engine = self.engine
        container = warm.id if warm is not None else \
            await engine.acquire(engine.remove, engine.create, spec)
        self._running[request.exec_id] = container
        try:
            started = await self._begin(container, warm, request, before_start)
            result = await drive(engine, started, request, self.shapes.capture(request),
                                 image_id=image_id, began=began, deadline=deadline,
                                 on_output=on_output)
        except BaseException:
            try:
                await asyncio.shield(engine.call(engine.remove, container) if warm is None
                                     else self.launcher.discard(warm))
            finally:
                self._running.pop(request.exec_id, None)
            raise
        self._running.pop(request.exec_id, None)
        if warm is None:
            await asyncio.shield(engine.call(engine.remove, container))
        # a used warm container's removal and the session's next one: off the call's path,
        # once the caller has settled it (close() waits for that)
        later = self._after_call(pool, settled, warm, key, template, request)
        after = asyncio.ensure_future(later)
        self._removals.add(after)
        self._after.setdefault(request.session, set()).add(after)
        after.add_done_callback(lambda done: self._forget_after(request.session, done))
        after_this_step(
            bound.info, "exec_finished",
            warm=warm is not None,
            container=container[:12],
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            truncated=result.truncated,
            duration_ms=result.duration_ms,
        )
        return result

    async def prefill(self, request: ExecRequest) -> bool:
        """Start filling the tenant's pool for calls like ``request`` (a new session's first
        call, before it is made): True when launches were asked for. Never blocks on the
        engine (the launches run in the background), within ``per_tenant`` and ``total``.
        A backend not started (or closed) warms nothing: a prefill never reconnects one that
        is being shut down."""
        root = self.launcher.bind_root
        if (not self.engine.connected or not self.warm.enabled or root is None
                or not root.opened or request.env or request.network == "egress"
                or request.workspace is None):
            return False
        image_id = await self.engine.image_id_of(request.image)
        template = pooled_template(self.shapes.spec(request, image_id), request.workdir)
        if template is None or template.runtime not in self._runtimes:
            return False
        key = f"{warm_key(template)}:{request.limits.timeout_s}"
        self.warm.replenish(key, self.launcher.spec_for(template, request),
                            f"@{request.tenant}", request.tenant)
        return True

    async def _begin(self, container: str, warm: WarmContainer | None, request: ExecRequest,
                     before_start: Awaitable[object] | None) -> Started:
        """``before_start`` (e.g. the audit intent: nothing runs before it), then the
        container runs: a cold one is attached and started, a warm one gets its job (it may
        linger where its exit state needs no engine call: the cgroup's OOM counter is read)."""
        started = None
        if warm is not None:
            linger = self.config.warm_linger and \
                oom_kills(container, self.shapes.cgroup_parent(request.tenant)) is not None
            started = start_warm(warm, request, linger=linger)
        if before_start is not None:
            if started is not None and isinstance(before_start, StartGate):
                before_start.when_open(started.feed_at_once)  # the job starts at the gate
            try:
                await before_start
            except BaseException:
                if isinstance(before_start, StartGate):
                    before_start.withdraw()
                if warm is not None:  # a taken warm container's attach socket
                    attach.shutdown(warm.attached)
                raise
        if started is not None:
            if not (started.fed or started.stdin_closed):  # no gate started it: start it now
                started.feed_at_once()
            return started
        return await start_cold(self.engine, container, request.stdin)

    def _forget_after(self, session: str, done: asyncio.Future[None]) -> None:
        self._removals.discard(done)
        pending = self._after.get(session)
        if pending is not None:
            pending.discard(done)
            if not pending:
                del self._after[session]

    def _warm_template(self, spec: ContainerSpec, request: ExecRequest) -> ContainerSpec:
        """The class a call's warm container comes from: the tenant's pooled one when the
        bind root is open (runc, a workspace), else the session's own spec."""
        root = self.launcher.bind_root
        if root is not None and root.opened and request.workspace is not None:
            return pooled_template(spec, request.workdir) or spec
        return spec

    async def _take(self, pool: WarmPool, key: str, request: ExecRequest
                    ) -> WarmContainer | None:
        """A warm container for this call; a pooled one gets the call's session bound (if
        that fails, it is removed and the call runs cold)."""
        warm = await pool.take(key)
        if warm is None or warm.slot is None or request.workspace is None:
            return warm
        try:
            BindRoot.attach(warm.slot, request.workspace, request.tmp)
        except SandboxError as exc:
            log.warning("late_bind_failed", session=request.session, error=str(exc))
            pool.stats["bind_refused"] += 1
            await asyncio.shield(self.launcher.discard(warm))
            return None
        return warm

    async def _after_call(
        self, pool: WarmPool, settled: Awaitable[object] | None, used: WarmContainer | None,
        key: str | None, template: ContainerSpec, request: ExecRequest,
    ) -> None:
        if settled is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(settled), SETTLE_WAIT_S)
        pooled = template.labels.get(LABEL_SESSION) == ""  # holds no session: may always come
        if key is not None and (pooled or self.may_launch(request.tenant, request.session)):
            pool.replenish(key, self.launcher.spec_for(template, request),
                           f"@{request.tenant}" if pooled else request.session,
                           request.tenant)
        if used is not None:  # its session's binds come off with its slot
            await self.launcher.discard(used, used=True)

    async def long_lived_spec(self, request: ExecRequest, *, lease_s: float,
                              egress: Path | None = None) -> ContainerSpec:
        """The hardened spec of a container that outlives one call (a kernel, a background
        process): the call's own spec (``egress``: its proxy socket), its lease ``lease_s``
        ahead (its owner removes it; a restart's sweep takes what is left), its mounted
        directories owned by the sandbox user."""
        await self.start()
        image_id = await self.engine.image_id_of(request.image)
        spec = self.shapes.spec(request, image_id, egress)
        if spec.runtime not in self._runtimes:
            await self._require_runtime(spec.runtime, request.limits.runtime)
        self.shapes.prepare_workspace(request)
        lease = str(int(time.time() + lease_s + self.config.lease_grace_s) + 1)
        return spec.model_copy(update={"labels": {**spec.labels, LABEL_LEASE: lease}})
