"""``DockerBackend``: every call in one fresh, hardened container, removed afterwards.

One call, in engine round trips: inspect the image (its id is what runs and what the audit
records) → create (``ContainerSpec``) → attach → start → [stream until EOF, or kill at the
deadline] → inspect (exit code, OOMKilled; ``wait`` only if the engine has not caught up) →
remove. The SDK is synchronous: short calls run in a backend-owned thread pool, the two
blocking stream directions in dedicated threads (``attach.py``).

Classified termination: a non-zero exit is a normal ``ExecResult`` ("your command failed");
``timed_out`` when we killed it at ``limits.timeout_s`` (counted from the call's start, so
the whole call takes at most timeout + kill + remove); ``oom_killed`` from the engine's
``State.OOMKilled``; ``truncated`` when a stream passed ``limits.output_bytes``. "The
sandbox broke" raises ``SandboxError`` / ``EngineUnavailable`` / ``ImageMissing``.
The container is removed on every path, cancellation included.

Warm path (``config.warm.size`` > 0; ``warm_pool.py``, ``warm_launch.py``, ``warm_runner.py``,
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
import functools
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import docker.errors
from docker import APIClient
from docker.constants import DEFAULT_UNIX_SOCKET
from docker.utils import kwargs_from_env
from pydantic import BaseModel, ConfigDict, Field

from runtime.config import Settings
from runtime.egress import EgressConfig, egress_proxy
from runtime.egress.proxy import Resolver
from runtime.errors import EngineUnavailable, RuntimeUnavailable, SandboxError
from runtime.logging import get_logger
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.capture import StreamCapture, StreamName
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.hostmounts import HardenState, ensure_nosuid_nodev, release_nosuid_nodev
from runtime.sandbox.docker.reaper import Reaper
from runtime.sandbox.docker.seccomp import DEFAULT_PROFILE_PATH, load_profile
from runtime.sandbox.docker.spec import (
    ContainerSpec,
    build_spec,
)
from runtime.sandbox.docker.warm_launch import WarmLaunchMixin
from runtime.sandbox.docker.warm_pool import WarmPool, WarmPoolConfig, warm_key
from runtime.sandbox.docker.warm_runner import job_frame
from runtime.sandbox.docker.warm_stream import TrailerCapture, Trailers
from runtime.sandbox.instance import load_instance_id
from runtime.sandbox.models import ExecRequest, ExecResult, MiB, OutputChunk

log = get_logger(__name__)
T = TypeVar("T")

IMAGE_ID_TTL_S = 2.0
"""How long an image's id is trusted before the engine is asked again (one call per image
per window instead of one per call)."""
SETTLE_WAIT_S = 5.0
"""The longest after-call work waits for the caller to settle a call (see ``run``)."""


class DockerBackendConfig(BaseModel):
    """Where the backend keeps things and whom it runs sandboxed code as."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_dir: Path
    workspaces_root: Path
    sandbox_uid: int = Field(65534, ge=1)
    lease_grace_s: float = Field(30.0, ge=0)
    seccomp_profile_path: Path = DEFAULT_PROFILE_PATH
    instance_id: str | None = Field(None, description="None: the one kept in the data dir")
    base_url: str | None = Field(None, description="None: DOCKER_HOST or the local socket")
    artifact_max_bytes: int = Field(256 * MiB, ge=MiB)
    harden_workspaces_root: bool = True
    kill_grace_s: float = Field(5.0, gt=0, description="wait for the stream after a kill")
    max_threads: int = Field(32, ge=4)
    warm: WarmPoolConfig = Field(
        default_factory=WarmPoolConfig, description="warm containers (size 0: every call cold)"
    )
    egress: EgressConfig = Field(default_factory=EgressConfig, description="egress proxies")
    # `limits.runtime` -> the engine's name for it. `setup.sh` registers gVisor as `runsc`
    # (`--network=none --oci-seccomp --host-uds=open`: no network stack of its own, the
    # container's seccomp profile enforced inside too, the egress socket reachable).
    engine_runtimes: dict[str, str] = Field(
        default_factory=lambda: {"runc": "runc", "gvisor": "runsc"})
    tenant_cgroups: bool = Field(True, description="a cgroup parent per tenant (fair CPU)")

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @classmethod
    def from_settings(
        cls, settings: Settings, *, warm_pool: bool = False, **overrides: Any
    ) -> DockerBackendConfig:
        """``warm_pool``: keep warm containers (a long-lived server; a one-shot CLI does not)."""
        values: dict[str, Any] = {
            "data_dir": settings.data_dir.resolve(),
            "workspaces_root": settings.workspaces_dir.resolve(),
            "sandbox_uid": settings.sandbox_uid,
            "lease_grace_s": settings.lease_grace_s,
            "tenant_cgroups": settings.tenant_cgroups,
            "egress": EgressConfig.from_settings(settings),
        }
        if warm_pool:
            values["warm"] = WarmPoolConfig(
                size=settings.warm_pool_size,
                idle_s=settings.warm_idle_s,
                burst=settings.warm_burst,
                per_tenant=settings.warm_per_tenant,
                total=settings.warm_total,
            )
        return cls(**{**values, **overrides})


class DockerBackend(WarmLaunchMixin):
    """``SandboxBackend`` on a Docker engine. ``await start()`` (or the first ``run``) connects."""

    def __init__(self, config: DockerBackendConfig) -> None:
        self.config = config
        self._api: APIClient | None = None
        self._instance_id: str | None = None
        self._seccomp = ""
        self._executor = self._new_executor()
        self._start_lock = asyncio.Lock()
        self._running: dict[str, str] = {}
        self.workspaces_root_state: HardenState | None = None
        self.warm = self._new_pool()
        self._removals: set[asyncio.Future[None]] = set()
        self._image_ids: dict[str, tuple[str, float]] = {}
        self.egress_resolver: Resolver | None = None  # None: the host's resolver (tests set one)
        self._runtimes: frozenset[str] = frozenset({"runc"})  # the engine's, read at start
        self._cgroup_driver = "cgroupfs"

    @classmethod
    def from_settings(
        cls, settings: Settings, *, warm_pool: bool = False, **overrides: Any
    ) -> DockerBackend:
        return cls(DockerBackendConfig.from_settings(settings, warm_pool=warm_pool, **overrides))

    def _new_pool(self) -> WarmPool:
        return WarmPool(self.config.warm, self._launch_warm, self._discard_warm)

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.config.max_threads, thread_name_prefix="navi-docker")

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, load the seccomp profile and the instance id, harden the workspaces root."""
        async with self._start_lock:
            if self._api is not None:
                return
            self._seccomp = load_profile(self.config.seccomp_profile_path)
            self._instance_id = self.config.instance_id or load_instance_id(self.config.data_dir)
            if self.config.harden_workspaces_root:
                self.workspaces_root_state = ensure_nosuid_nodev(self.config.workspaces_root)
            self._api = await self._call(self._connect)
            info = await self._call(self._engine_info)
            self._runtimes = frozenset(info.get("Runtimes") or {"runc": {}})
            self._cgroup_driver = str(info.get("CgroupDriver") or "cgroupfs")
            log.info("docker_backend_started", instance=self._instance_id,
                     runtimes=sorted(self._runtimes))

    def _connect(self) -> APIClient:
        kwargs = kwargs_from_env()
        if self.config.base_url:
            kwargs["base_url"] = self.config.base_url
        base_url = str(kwargs.get("base_url") or DEFAULT_UNIX_SOCKET)
        if base_url.startswith(("unix://", "http+unix://")):
            # the SDK leaks the socket of a failed connect; find out with our own first
            path = base_url.split("://", 1)[1]
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(5)
                try:
                    probe.connect(path)
                except OSError as exc:
                    raise EngineUnavailable(
                        f"cannot reach the Docker engine at {path}: {exc.strerror or exc}; "
                        "is dockerd running?"
                    ) from exc
        with map_docker_errors("connect"):
            return APIClient(version="auto", timeout=60, max_pool_size=64, **kwargs)

    @property
    def api(self) -> APIClient:
        if self._api is None:
            raise SandboxError("the Docker backend is not started")
        return self._api

    @property
    def instance_id(self) -> str:
        if self._instance_id is None:
            raise SandboxError("the Docker backend is not started")
        return self._instance_id

    def reaper(self) -> Reaper:
        """A reaper for this backend's instance, sharing its client and threads."""
        return Reaper(self.api, self.instance_id, self._executor)

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
            await self._call(self._remove, container)
        if self._api is not None:
            self._api.close()
            self._api = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = self._new_executor()  # a closed backend may be started again
        self.warm = self._new_pool()
        release_nosuid_nodev(self.config.workspaces_root, self.workspaces_root_state)
        self.workspaces_root_state = None

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _acquire(self, release: Callable[[T], None], fn: Callable[..., T], *args: Any) -> T:
        """``_call`` for something that must be released: if we are cancelled while the
        thread still runs, whatever it creates (container, socket) is released when it lands.
        """
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, functools.partial(fn, *args))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            try:
                value = await asyncio.shield(future)  # let the step land, then undo it
            except asyncio.CancelledError:  # cancelled again: undo it whenever it lands

                def orphaned(done: asyncio.Future[T]) -> None:
                    if not done.cancelled() and done.exception() is None:
                        self._executor.submit(release, done.result())

                future.add_done_callback(orphaned)
                raise
            except Exception:
                pass  # the step failed: nothing to undo
            else:
                await asyncio.shield(self._call(release, value))
            raise

    # -- one call --------------------------------------------------------------------------

    async def kill(self, exec_id: str) -> None:
        container = self._running.get(exec_id)
        if container is not None:
            await self._call(self._kill_quietly, container)

    def _kill_quietly(self, container: str) -> None:
        try:
            self.api.kill(container)
        except docker.errors.APIError as exc:  # already exited (409) or removed (404)
            if exc.status_code not in (404, 409):
                log.warning("kill_failed", container=container[:12], error=str(exc))

    def _image_id(self, image: str) -> str:
        with map_docker_errors(f"inspect the image {image!r}", image=image):
            return str(self.api.inspect_image(image)["Id"])

    def _create(self, spec: ContainerSpec) -> str:
        with map_docker_errors("create the sandbox container", image=spec.image):
            host_config = self.api.create_host_config(**spec.host_config_kwargs())
            return str(self.api.create_container(**spec.create_kwargs(host_config))["Id"])

    def _remove(self, container: str) -> None:
        try:
            self.api.remove_container(container, force=True)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # the reaper removes it later (lease)
            log.error("container_remove_failed", container=container[:12], error=str(exc))

    def _artifacts_dir(self, request: ExecRequest) -> Path:
        """Beside the workspace, on the session's own disk (they count against its quota and
        go with it; the sandbox cannot reach them), else under the data dir."""
        if request.workspace is not None:
            beside = request.workspace.parent / "artifacts"
            if beside.is_dir() and not beside.is_symlink():
                return beside
        return Path(self.config.artifacts_dir, request.session)

    def _cgroup_parent(self, tenant: str) -> str | None:
        """Each tenant's containers under a cgroup of the tenant's own: CPU is then shared
        between tenants (equal weights), not between containers, so one tenant running its
        maximum cannot take the CPU from another's calls (DESIGN: fair share)."""
        if not self.config.tenant_cgroups or not re.fullmatch(r"[A-Za-z0-9_.-]{1,48}", tenant):
            return None
        if self._cgroup_driver == "systemd":
            return f"navi-{tenant.replace('-', '_')}.slice"
        return f"/navi/{tenant}"

    def _engine_info(self) -> dict[str, Any]:
        with map_docker_errors("read the engine's runtimes and cgroup driver"):
            return dict(self.api.info())

    def _engine_runtimes(self) -> frozenset[str]:
        return frozenset(self._engine_info().get("Runtimes") or {"runc": {}})

    @property
    def runtimes(self) -> frozenset[str]:
        """OCI runtimes the engine offers (``runsc`` is gVisor)."""
        return self._runtimes

    async def _require_runtime(self, engine_name: str, tier: str) -> None:
        """Read the engine's runtimes again (one may have been registered since start);
        ``RuntimeUnavailable`` if it still lacks this one: never fall back to another."""
        self._runtimes = await self._call(self._engine_runtimes)
        if engine_name not in self._runtimes:
            raise RuntimeUnavailable(
                f"the policy runs this call under {tier}, and the Docker engine has no "
                f"{engine_name!r} runtime; `make run` registers it, or see README "
                "(\"Runtime tiers\")", runtime=tier)

    def _uid(self, request: ExecRequest) -> int:
        return request.uid if request.uid is not None else self.config.sandbox_uid

    def _prepare_workspace(self, request: ExecRequest) -> None:
        """The sandbox user must own the workspace directory to write in it."""
        workspace = request.workspace
        if workspace is None or os.geteuid() != 0:
            return
        st = os.lstat(workspace)
        uid = self._uid(request)
        if (st.st_uid, st.st_gid) != (uid, uid):
            os.chown(workspace, uid, uid, follow_symlinks=False)

    def _final_state(self, container: str) -> dict[str, Any]:
        with map_docker_errors("inspect the finished sandbox container"):
            state = self.api.inspect_container(container)["State"]
            if state.get("Running") or state.get("Status") not in ("exited", "dead"):
                self.api.wait(container)
                state = self.api.inspect_container(container)["State"]
        return dict(state)

    def _spec(
        self, request: ExecRequest, image_id: str, egress: Path | None = None
    ) -> ContainerSpec:
        lease_until = int(time.time() + request.limits.timeout_s + self.config.lease_grace_s) + 1
        return build_spec(
            request,
            image_id=image_id,
            seccomp_profile=self._seccomp,
            sandbox_uid=self._uid(request),
            instance_id=self.instance_id,
            lease_until=lease_until,
            workspaces_root=self.config.workspaces_root,
            egress_socket=egress,
            engine_runtime=self.config.engine_runtimes[request.limits.runtime],
            cgroup_parent=self._cgroup_parent(request.tenant),
        )

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        if request.network == "egress":  # its proxy lives exactly as long as the call
            async with egress_proxy(request.egress_allowlist, self.config.egress,
                                    self.config.data_dir / "egress",
                                    exec_id=request.exec_id,
                                    resolver=self.egress_resolver) as proxy:
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
        started = time.monotonic()
        deadline = started + request.limits.timeout_s
        bound = log.bind(exec_id=request.exec_id, tenant=request.tenant, session=request.session)
        image_id = await self._image_id_of(request.image)
        spec = self._spec(request, image_id, egress)
        if spec.runtime not in self._runtimes:
            await self._require_runtime(spec.runtime, request.limits.runtime)
        self._prepare_workspace(request)
        # warm ones are made without a socket, and no secret waits in an idle container
        cold = not self.warm.enabled or egress is not None or bool(request.env)
        key = None if cold else f"{warm_key(spec)}:{request.limits.timeout_s}"
        pool = self.warm  # close() swaps it: this call settles with the one it took from
        warm = await pool.take(key) if key is not None else None
        if warm is not None:
            container, attached = warm.id, warm.attached
        else:
            container, attached = await self._acquire(self._remove, self._create, spec), None
        self._running[request.exec_id] = container
        try:
            if before_start is not None:  # e.g. the audit intent: nothing runs before it
                try:
                    await before_start
                except BaseException:
                    if attached is not None:  # a taken warm container's attach socket
                        attach.shutdown(attached)
                    raise
            result = await self._drive(
                container, request, image_id, started, deadline, on_output, attached
            )
        except BaseException:
            try:
                await asyncio.shield(self._call(self._remove, container))
            finally:
                self._running.pop(request.exec_id, None)
            raise
        self._running.pop(request.exec_id, None)
        if warm is None:
            await asyncio.shield(self._call(self._remove, container))
        # a used warm container's removal and the session's next one: off the call's path,
        # once the caller has settled it (close() waits for that)
        later = self._after_call(pool, settled, container if warm is not None else None,
                                 key, spec, request)
        after = asyncio.ensure_future(later)
        self._removals.add(after)
        after.add_done_callback(self._removals.discard)
        bound.info(
            "exec_finished",
            warm=warm is not None,
            container=container[:12],
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            truncated=result.truncated,
            duration_ms=result.duration_ms,
        )
        return result

    async def _after_call(
        self, pool: WarmPool, settled: Awaitable[object] | None, used: str | None,
        key: str | None, spec: ContainerSpec, request: ExecRequest,
    ) -> None:
        if settled is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(settled), SETTLE_WAIT_S)
        if key is not None:
            pool.replenish(key, self._warm_spec(spec, request), request.session,
                                request.tenant)
        if used is not None:
            await self._call(self._remove, used)

    async def _image_id_of(self, image: str) -> str:
        """The image's id, asked of the engine at most every ``IMAGE_ID_TTL_S`` per image
        (a rebuilt image is used from then on; a call records the id it ran)."""
        now = time.monotonic()
        known = self._image_ids.get(image)
        if known is not None and now - known[1] < IMAGE_ID_TTL_S:
            return known[0]
        image_id = await self._call(self._image_id, image)
        self._image_ids[image] = (image_id, now)
        return image_id

    async def release_session(self, session: str) -> None:
        """Remove the session's warm containers (its calls still running are not touched)."""
        await self.warm.release_session(session)

    async def _drive(
        self,
        container: str,
        request: ExecRequest,
        image_id: str,
        started: float,
        deadline: float,
        on_output: OutputCallback | None,
        attached: Any = None,
    ) -> ExecResult:
        """Stream one call to its end; ``attached``: a warm container, started and waiting."""
        stdin = request.stdin
        if attached is None:
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "logs": 0}
            with map_docker_errors("attach to the sandbox container"):
                attached = await self._acquire(
                    attach.shutdown, self.api.attach_socket, container, params
                )
            cold, nonce = True, ""
        else:
            nonce = os.urandom(16).hex()
            stdin, cold = job_frame(request.argv, nonce) + stdin, False
        sock = attach.raw_socket(attached)
        base = self._artifacts_dir(request) / request.exec_id
        captures = {
            attach.STDOUT: StreamCapture(
                name="stdout",
                cap=request.limits.output_bytes,
                artifact_path=base.with_name(f"{request.exec_id}.stdout"),
                artifact_max=self.config.artifact_max_bytes,
            ),
            attach.STDERR: StreamCapture(
                name="stderr",
                cap=request.limits.output_bytes,
                artifact_path=base.with_name(f"{request.exec_id}.stderr"),
                artifact_max=self.config.artifact_max_bytes,
            ),
        }
        pumped: dict[int, Any] = dict(captures)
        trailers = None
        if not cold:  # the runner marks the job's end on both streams

            def ended() -> None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

            trailers = Trailers(nonce, ended)
            pumped = {k: TrailerCapture(c, trailers) for k, c in captures.items()}
        live: asyncio.Queue[OutputChunk | None] = asyncio.Queue()
        forwarder = asyncio.create_task(_forward(live, on_output)) if on_output else None
        loop = asyncio.get_running_loop()

        def emit(stream: StreamName, data: bytes) -> None:
            loop.call_soon_threadsafe(live.put_nowait, OutputChunk(stream=stream, data=data))

        timed_out = False
        try:
            if cold:
                with map_docker_errors("start the sandbox container"):
                    await self._call(self.api.start, container)
            pump = attach.in_thread(
                attach.pump_output, sock, pumped, emit if on_output else None, name="navi-out"
            )
            attach.in_thread(attach.feed_stdin, sock, stdin, name="navi-in")
            done, _ = await asyncio.wait({pump}, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                timed_out = True
                await self._call(self._kill_quietly, container)
                done, _ = await asyncio.wait({pump}, timeout=self.config.kill_grace_s)
                if not done:
                    attach.shutdown(attached)
                    await pump
            finished = time.monotonic()
            for capture in pumped.values():
                if isinstance(capture, TrailerCapture) and (held := capture.flush()) and on_output:
                    emit(capture.name, held)
            state = await self._exit_state(container, trailers, timed_out,
                                           self._cgroup_parent(request.tenant))
        finally:
            attach.shutdown(attached)
            for capture in captures.values():
                capture.close()
            if forwarder is not None:
                live.put_nowait(None)
                await forwarder
        out, err = captures[attach.STDOUT], captures[attach.STDERR]
        return ExecResult(
            exec_id=request.exec_id,
            exit_code=state.get("ExitCode"),
            stdout=out.result(),
            stderr=err.result(),
            timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")),
            truncated=out.truncated or err.truncated,
            duration_ms=int((finished - started) * 1000),
            image_digest=image_id,
            stdout_size=out.size,
            stderr_size=err.size,
            artifacts=[str(c.artifact) for c in (out, err) if c.artifact is not None],
        )


async def _forward(queue: asyncio.Queue[OutputChunk | None], on_output: OutputCallback) -> None:
    """Hand live chunks to the caller in order; a failing callback never breaks the call."""
    healthy = True
    while (chunk := await queue.get()) is not None:
        if not healthy:
            continue
        try:
            await on_output(chunk)
        except Exception as exc:
            healthy = False
            log.warning("on_output_failed", error=str(exc))
