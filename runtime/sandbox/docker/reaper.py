"""Remove our containers that outlived their lease, and all of them after a crash.

Every container carries ``navi.instance`` (whose they are) and ``navi.lease_until`` (unix
seconds: start + timeout + grace). The backend removes its containers itself; the reaper is
the safety net for what it could not: a supervisor killed with SIGKILL, an engine hiccup
during removal, a wedged call.

- ``reap_expired()``: our containers past their lease (a missing or broken lease counts as
  expired); run periodically by ``start_periodic``.
- ``reconcile_startup()``: every container of our instance, whatever its lease, but those
  a live record adopted (background processes). Call it once before the backend accepts
  calls: anything else still there belongs to a previous life.

Only the label filter ``navi.instance=<ours>`` selects containers, so another supervisor's
containers on the same engine are never touched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import docker.errors
from docker import APIClient

from runtime.logging import get_logger
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.spec import LABEL_EXEC_ID, LABEL_INSTANCE, LABEL_LEASE

T = TypeVar("T")

log = get_logger(__name__)


class Reaper:
    def __init__(self, api: APIClient, instance_id: str, executor: Executor | None = None) -> None:
        if not instance_id:
            raise ValueError("the reaper needs an instance id")
        self._api = api
        self.instance_id = instance_id
        self._executor = executor

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args))

    def _ours(self) -> list[dict[str, Any]]:
        with map_docker_errors("list sandbox containers"):
            found = self._api.containers(
                all=True, filters={"label": f"{LABEL_INSTANCE}={self.instance_id}"}
            )
        # the engine filtered already; check again so a filter bug can never widen the sweep
        return [c for c in found if (c.get("Labels") or {}).get(LABEL_INSTANCE) == self.instance_id]

    def _remove(self, container: dict[str, Any], reason: str) -> bool:
        labels = container.get("Labels") or {}
        try:
            with map_docker_errors("remove a sandbox container"):
                self._api.remove_container(container["Id"], force=True)
        except Exception as exc:  # one stuck container must not stop the sweep
            if isinstance(exc.__cause__, docker.errors.NotFound):
                return False
            log.warning("reap_failed", container=container["Id"][:12], error=str(exc))
            return False
        log.info(
            "container_reaped",
            container=container["Id"][:12],
            exec_id=labels.get(LABEL_EXEC_ID),
            reason=reason,
        )
        return True

    def _sweep(self, now: float | None, keep: frozenset[str] = frozenset()) -> list[str]:
        removed = []
        for container in self._ours():
            if container["Id"] in keep:
                continue
            if now is not None:
                lease = (container.get("Labels") or {}).get(LABEL_LEASE, "")
                if lease.isdigit() and int(lease) >= now:
                    continue
            if self._remove(container, "lease expired" if now is not None else "startup"):
                removed.append(container["Id"])
        return removed

    async def reap_expired(self, now: float | None = None) -> list[str]:
        """Remove our containers whose lease ended before ``now``; returns their ids."""
        return await self._call(self._sweep, time.time() if now is None else now)

    async def reconcile_startup(self, keep: frozenset[str] = frozenset()) -> list[str]:
        """Remove every container of our instance (crash recovery) but those in ``keep``
        (background processes adopted with their records); returns their ids."""
        removed = await self._call(self._sweep, None, keep)
        log.info("startup_reconcile", instance=self.instance_id, removed=len(removed))
        return removed

    async def run_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.reap_expired()
            except Exception as exc:  # the engine may come back; keep sweeping
                log.warning("reaper_sweep_failed", error=str(exc))

    def start_periodic(self, interval_s: float) -> asyncio.Task[None]:
        """The periodic sweep as a task; cancel it at shutdown."""
        return asyncio.create_task(self.run_forever(interval_s), name="navi-reaper")
