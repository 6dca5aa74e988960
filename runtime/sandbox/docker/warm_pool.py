"""Ready, single-use containers per (session, class), so a call skips create and start.

A *class* is everything a container is made of except the job: image id, limits, workspace,
workdir, mounts, env, tenant, session and labels (``warm_key``). The backend launches warm
containers (create → attach → start → runner says ready) from the very ``ContainerSpec`` a
cold call of that class would get, so they carry exactly the same confinement.

Rules:
- ``take(key)`` hands a ready container to exactly one call, and forgets it: a warm
  container never serves two calls. With none ready it waits for one being launched for
  that class (unclaimed), else returns None (the call runs cold).
- ``replenish`` (after a call) launches in the background up to the class's *depth*, never
  more than ``per_tenant`` held (ready or launching) by one tenant nor ``total`` by the
  whole server (a lab server's many sessions must not pin unbounded memory). The depth
  starts at ``size``; each call that finds nothing ready (it waits, or runs cold) adds one,
  up to ``burst`` (a session calling back to back, such as an eval harness, soon finds its
  calls warm), and each container that expires unused takes one away (down to ``size``).
- A ready container idle for ``idle_s`` is removed; ``release_session`` removes a session's,
  ``close`` all. Each carries a lease label (idle + timeout + grace) so the reaper removes it
  if the supervisor dies.
- A class whose launch failed (e.g. an image without python3) is not retried for
  ``retry_after_s``; its calls run cold.

The pool does no engine I/O itself: ``launch`` and ``discard`` come from the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.logging import get_logger
from runtime.sandbox.docker.late_bind import Slot
from runtime.sandbox.docker.spec import LABEL_EXEC_ID, LABEL_LEASE, ContainerSpec

log = get_logger(__name__)


class WarmPoolConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(0, ge=0, le=16, description="ready containers per session and class")
    idle_s: float = Field(60.0, gt=0, description="an unused ready container is removed after")
    per_tenant: int = Field(8, ge=0, description="warm containers one tenant may hold")
    total: int = Field(64, ge=0, description="warm containers the whole server may hold")
    ready_timeout_s: float = Field(10.0, gt=0, description="start → runner ready, at most")
    retry_after_s: float = Field(60.0, ge=0, description="pause for a class whose launch failed")
    burst: int = Field(4, ge=0, le=16, description="most ready per class for a busy session")
    late_bind: bool = Field(False, description="runc session calls: one pool per tenant "
                            "class, the session bound when a call takes one (late_bind.py)")


@dataclass(eq=False)
class WarmContainer:
    """A started container whose runner waits on stdin; ``attached`` is its attach socket."""

    id: str
    key: str
    session: str
    tenant: str
    image_id: str
    attached: Any
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)
    slot: Slot | None = None  # a tenant's pooled container: where its session is bound


@dataclass(eq=False)
class _Launch:
    session: str
    tenant: str
    generation: int
    task: asyncio.Task[WarmContainer | None] | None = None
    claimed: bool = False


def warm_key(spec: ContainerSpec) -> str:
    """The class of a spec: all of it but argv and the per-container labels."""
    labels = {k: v for k, v in spec.labels.items() if k not in (LABEL_EXEC_ID, LABEL_LEASE)}
    body = spec.model_dump(mode="json", exclude={"argv", "labels"})
    body["labels"] = labels
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


Launcher = Callable[[ContainerSpec, str], Awaitable[WarmContainer]]
Discarder = Callable[[WarmContainer], Awaitable[None]]


class WarmPool:
    def __init__(self, config: WarmPoolConfig, launch: Launcher, discard: Discarder) -> None:
        self.config = config
        self._launch_fn = launch
        self._discard_fn = discard
        self._ready: dict[str, deque[WarmContainer]] = {}
        self._launching: dict[str, list[_Launch]] = {}
        self._held: Counter[str] = Counter()
        self._generation: Counter[str] = Counter()
        self._broken: dict[str, float] = {}
        self._depth: dict[str, tuple[str, int]] = {}  # key -> (session, ready wanted)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self.stats: Counter[str] = Counter()  # taken, waited, missed, launched, failed, expired

    @property
    def enabled(self) -> bool:
        return self.config.size > 0 and not self._closed

    def depth(self, key: str) -> int:
        """How many of this class to keep ready (or on the way)."""
        return self._depth.get(key, ("", self.config.size))[1]

    def _adjust(self, key: str, session: str, step: int) -> None:
        low, high = self.config.size, max(self.config.size, self.config.burst)
        self._depth[key] = (session, min(high, max(low, self.depth(key) + step)))

    def ready_count(self, session: str | None = None) -> int:
        return sum(
            1 for q in self._ready.values() for c in q if session is None or c.session == session
        )

    # -- calls -----------------------------------------------------------------------------

    async def take(self, key: str) -> WarmContainer | None:
        """A ready container of this class for one call, or None (run cold)."""
        if not self.enabled:
            return None
        ready = self._ready.get(key)
        if ready:
            self.stats["taken"] += 1
            container = ready.popleft()
            self._prune(key)
            return self._forget(container)
        for launch in self._launching.get(key, []):
            if launch.claimed or launch.task is None:
                continue
            launch.claimed = True
            # bounded; if we give up or are cancelled, it lands ready for the next call
            await asyncio.wait({launch.task}, timeout=self.config.ready_timeout_s)
            if not launch.task.done():
                launch.claimed = False
                break
            landed = None if launch.task.cancelled() else launch.task.result()
            queue = self._ready.get(key)
            if landed is not None and queue is not None and landed in queue:
                queue.remove(landed)
                self._prune(key)
                self.stats["waited"] += 1
                self._adjust(key, landed.session, +1)
                return self._forget(landed)
            break
        self.stats["missed"] += 1
        if key in self._depth:  # a session of this class is calling faster than we launch
            self._adjust(key, self._depth[key][0], +1)
        return None

    def _prune(self, key: str) -> None:
        """Drop the class's empty entries: a key names one session's spec, so entries left
        behind would grow with every session the server ever had."""
        if not self._ready.get(key, True):
            del self._ready[key]
        if not self._launching.get(key, True):
            del self._launching[key]

    def _forget(self, container: WarmContainer) -> WarmContainer:
        if container.timer is not None:
            container.timer.cancel()
        self._held[container.tenant] -= 1
        return container

    def replenish(self, key: str, spec: ContainerSpec, session: str, tenant: str) -> None:
        """Launch in the background until the class has ``size`` ready or on the way."""
        if not self.enabled or self._closed:
            return
        broken_at = self._broken.get(key)
        if broken_at is not None and time.monotonic() - broken_at < self.config.retry_after_s:
            return
        if key not in self._depth:
            self._depth[key] = (session, self.config.size)
        have = len(self._ready.get(key, ())) + sum(
            1 for launch in self._launching.get(key, []) if not launch.claimed
        )
        while (have < self.depth(key) and self._held[tenant] < self.config.per_tenant
               and self._held.total() < self.config.total):
            launch = _Launch(session, tenant, self._generation[session])
            self._held[tenant] += 1
            self._launching.setdefault(key, []).append(launch)
            launch.task = self._spawn(self._launch(key, spec, launch))
            have += 1

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _launch(self, key: str, spec: ContainerSpec, launch: _Launch) -> WarmContainer | None:
        try:
            container = await self._launch_fn(spec, key)
        except BaseException as exc:
            self._held[launch.tenant] -= 1
            now = time.monotonic()
            self._broken = {k: at for k, at in self._broken.items()  # forget stale ones
                            if now - at < self.config.retry_after_s}
            self._broken[key] = now
            self.stats["failed"] += 1
            if isinstance(exc, Exception):
                log.warning("warm_launch_failed", session=launch.session, error=str(exc))
                return None
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._launching.get(key, []).remove(launch)
            self._prune(key)
        self._broken.pop(key, None)
        self.stats["launched"] += 1
        if self._closed or launch.generation != self._generation[launch.session]:
            self._held[launch.tenant] -= 1
            await self._discard(container)
            return None
        loop = asyncio.get_running_loop()
        container.timer = loop.call_later(self.config.idle_s, self._expire, container)
        self._ready.setdefault(key, deque()).append(container)
        return container

    def _expire(self, container: WarmContainer) -> None:
        queue = self._ready.get(container.key)
        if queue is None or container not in queue:
            return
        queue.remove(container)
        self._prune(container.key)
        self._forget(container)
        self._adjust(container.key, container.session, -1)
        self.stats["expired"] += 1
        self._spawn(self._discard(container))

    async def _discard(self, container: WarmContainer) -> None:
        try:
            await self._discard_fn(container)
        except Exception as exc:  # the reaper removes it at its lease
            log.warning("warm_discard_failed", container=container.id[:12], error=str(exc))

    # -- ending ----------------------------------------------------------------------------

    async def _drain(self, session: str | None) -> None:
        if session is None:
            self._closed = True
        else:
            self._generation[session] += 1
        self._depth = {k: v for k, v in self._depth.items()
                       if session is not None and v[0] != session}
        launching = [
            launch.task
            for launches in self._launching.values()
            for launch in launches
            if launch.task is not None and (session is None or launch.session == session)
        ]
        if launching:  # they land and see the new generation (or closed): discarded
            await asyncio.wait(launching)
        doomed = []
        for key, queue in list(self._ready.items()):
            for container in list(queue):
                if session is None or container.session == session:
                    queue.remove(container)
                    doomed.append(self._forget(container))
            self._prune(key)
        await asyncio.gather(*(self._discard(c) for c in doomed))
        if session is not None:  # its launches have all landed: its generation may go
            self._generation.pop(session, None)

    async def release_session(self, session: str) -> None:
        """Remove the session's warm containers, those still launching included."""
        await self._drain(session)

    async def close(self) -> None:
        """Remove every warm container; the pool takes no more."""
        await self._drain(None)
        if self._tasks:
            await asyncio.wait(list(self._tasks))
