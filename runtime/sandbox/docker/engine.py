"""``DockerEngine``: the one object every Docker step goes through.

The SDK is synchronous: each step (``create``, ``attach``, ``start``, ``remove``, …) is a
plain method, run off the event loop by ``call`` in the engine's own thread pool, or by
``acquire`` when what it makes (a container, a socket) must be released should the caller
be cancelled while the thread still runs. Errors come out as ours (``errors.py``).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker.errors
from docker import APIClient
from docker.constants import DEFAULT_UNIX_SOCKET
from docker.utils import kwargs_from_env

from runtime.errors import EngineUnavailable, SandboxError
from runtime.logging import get_logger
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.spec import ContainerSpec

log = get_logger(__name__)
T = TypeVar("T")

IMAGE_ID_TTL_S = 2.0
"""How long an image's id is trusted before the engine is asked again (one call per image
per window instead of one per call)."""
ATTACH_PARAMS = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "logs": 0}


class DockerEngine:
    def __init__(self, base_url: str | None = None, max_threads: int = 32) -> None:
        self.base_url = base_url
        self.max_threads = max_threads
        self._api: APIClient | None = None
        self._executor = self._new_executor()
        self._image_ids: dict[str, tuple[str, float]] = {}

    def _new_executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.max_threads, thread_name_prefix="navi-docker")

    # -- connection ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._api is not None

    @property
    def api(self) -> APIClient:
        if self._api is None:
            raise SandboxError("the Docker backend is not started")
        return self._api

    @property
    def threads(self) -> ThreadPoolExecutor:
        return self._executor

    async def connect(self) -> None:
        self._api = await self.call(self._connect)

    def _connect(self) -> APIClient:
        kwargs = kwargs_from_env()
        if self.base_url:
            kwargs["base_url"] = self.base_url
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

    def disconnect(self) -> None:
        """Close the client and the thread pool (a disconnected engine may connect again)."""
        if self._api is not None:
            self._api.close()
            self._api = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._executor = self._new_executor()

    # -- running steps off the loop --------------------------------------------------------

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def acquire(self, release: Callable[[T], None], fn: Callable[..., T], *args: Any) -> T:
        """``call`` for something that must be released: if we are cancelled while the
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
                await asyncio.shield(self.call(release, value))
            raise

    # -- the steps (synchronous: run them with `call`/`acquire`) ---------------------------

    def info(self) -> dict[str, Any]:
        with map_docker_errors("read the engine's runtimes and cgroup driver"):
            return dict(self.api.info())

    def runtimes(self) -> frozenset[str]:
        return frozenset(self.info().get("Runtimes") or {"runc": {}})

    def image_id(self, image: str) -> str:
        with map_docker_errors(f"inspect the image {image!r}", image=image):
            return str(self.api.inspect_image(image)["Id"])

    def create(self, spec: ContainerSpec) -> str:
        with map_docker_errors("create the sandbox container", image=spec.image):
            host_config = self.api.create_host_config(**spec.host_config_kwargs())
            return str(self.api.create_container(**spec.create_kwargs(host_config))["Id"])

    def attach(self, container: str) -> Any:
        """The container's stdin/stdout/stderr as one socket (before it starts)."""
        with map_docker_errors("attach to the sandbox container"):
            return self.api.attach_socket(container, ATTACH_PARAMS)

    def start(self, container: str) -> None:
        with map_docker_errors("start the sandbox container"):
            self.api.start(container)

    def kill_quietly(self, container: str) -> None:
        """Kill; one already down (409) or gone (404) is no error, an engine's refusal is
        logged, an engine that does not answer is ``EngineUnavailable``."""
        with map_docker_errors("kill the sandbox container"):
            try:
                self.api.kill(container)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):
                    log.warning("kill_failed", container=container[:12], error=str(exc))

    def remove(self, container: str) -> None:
        try:
            self.api.remove_container(container, force=True)
        except docker.errors.NotFound:
            pass
        except Exception as exc:  # the reaper removes it later (lease)
            log.error("container_remove_failed", container=container[:12], error=str(exc))

    def final_state(self, container: str) -> dict[str, Any]:
        """``State`` once the container is down (``wait`` only if the engine lags)."""
        with map_docker_errors("inspect the finished sandbox container"):
            state = self.api.inspect_container(container)["State"]
            if state.get("Running") or state.get("Status") not in ("exited", "dead"):
                self.api.wait(container)
                state = self.api.inspect_container(container)["State"]
        return dict(state)

    async def image_id_of(self, image: str) -> str:
        """The image's id, asked of the engine at most every ``IMAGE_ID_TTL_S`` per image
        (a rebuilt image is used from then on; a call records the id it ran)."""
        now = time.monotonic()
        known = self._image_ids.get(image)
        if known is not None and now - known[1] < IMAGE_ID_TTL_S:
            return known[0]
        image_id = await self.call(self.image_id, image)
        self._image_ids[image] = (image_id, now)
        return image_id
