"""Who is using which session disk, and since when: the leases behind idle release.

A session's disk is mounted while it is in use and released after ``NAVI_SESSION_IDLE_S``
without use, so sessions at rest cost no mount (docs/sessions.md). Every use holds a lease: an open
``Workspace`` (a call holds one for its whole run, the files API for each operation). A lease
is taken under the lock *before* the disk is mounted, and a release re-checks the leases
under the same lock before it unmounts, holding the session's gate, which a mount takes too:
a call that arrives while its session is being released waits at the gate and mounts again.

``exclusive`` is the other way round (snapshots, restore): it waits for, or refuses, the
leases in flight and holds new ones back until it ends (409 ``session_busy``).

The release task (``release_idle``) runs in the app's lifespan; the release itself is
``Workspaces.release`` (warm containers first: they bind-mount the workspace).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, Protocol

from runtime.errors import SessionBusy
from runtime.logging import get_logger
from runtime.workspace.workspace import Workspace

log = get_logger(__name__)

Key = tuple[str, str]  # (tenant id, session id)
# how long a new use waits behind an exclusive hold (a restore's copy) in a worker thread
# before 409 session_busy: short, the API waits out a longer hold without a thread
# (``held``) before it asks for a lease
EXCLUSIVE_WAIT_S = 5.0


class Activity:
    """Leases, last uses and mount gates of sessions (in memory: after a restart nothing is
    mounted, so nothing needs remembering)."""

    def __init__(self, idle_s: float = 300.0, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self._cond = threading.Condition()
        self._leases: dict[Key, int] = {}
        self._used: dict[Key, float] = {}
        self._exclusive: set[Key] = set()
        self._gates: dict[Key, threading.Lock] = {}
        self._active: set[Key] = set()  # disk mounted (or, without disks, not yet released)
        self._releasing: set[Key] = set()  # warm containers being dropped, disk unmounted

    def take(self, key: Key) -> None:
        """A lease on the session (give it back with ``give``); waits behind an exclusive
        hold, ``SessionBusy`` if that does not end in time."""
        with self._cond:
            if not self._cond.wait_for(lambda: key not in self._exclusive,
                                       timeout=EXCLUSIVE_WAIT_S):
                raise SessionBusy("the session is busy (a snapshot or restore); try again")
            self._leases[key] = self._leases.get(key, 0) + 1
            self._used[key] = self.clock()

    def give(self, key: Key) -> None:
        with self._cond:
            left = self._leases.get(key, 0) - 1
            if left > 0:
                self._leases[key] = left
            else:
                self._leases.pop(key, None)
            self._used[key] = self.clock()
            self._cond.notify_all()

    def touch(self, key: Key) -> None:
        """A use without a lease (the session was just made)."""
        with self._cond:
            self._used[key] = self.clock()

    def held(self, key: Key) -> bool:
        """Whether the session is held exclusively (a snapshot restore) right now."""
        with self._cond:
            return key in self._exclusive

    def busy(self, key: Key) -> bool:
        with self._cond:
            return self._leases.get(key, 0) > 0 or key in self._exclusive

    def gate(self, key: Key) -> threading.Lock:
        """The lock that mounting and releasing this session's disk hold."""
        with self._cond:
            return self._gates.setdefault(key, threading.Lock())

    def is_active(self, key: Key) -> bool:
        with self._cond:
            return key in self._active

    def active(self) -> list[Key]:
        with self._cond:
            return list(self._active)

    def mark_active(self, key: Key) -> None:
        with self._cond:
            self._active.add(key)
            self._used.setdefault(key, self.clock())

    def begin_release(self, key: Key) -> bool:
        """Mark the session as being released, unless a lease is out or it is held."""
        with self._cond:
            if self._leases.get(key, 0) > 0 or key in self._exclusive:
                return False
            self._releasing.add(key)
            return True

    def end_release(self, key: Key) -> None:
        with self._cond:
            self._releasing.discard(key)

    def may_launch(self, key: Key) -> bool:
        """Whether a warm container may be made for the session now: its disk is mounted and
        not being released or held (checked on the loop in the same step as the launch is
        registered, so a release's drop of warm containers, which comes after its mark,
        finds the launch and discards it)."""
        with self._cond:
            return (key in self._active and key not in self._releasing
                    and key not in self._exclusive)

    def retire(self, key: Key, *, held: bool = False) -> bool:
        """Mark the session idle unless a lease is out (checked under the same lock a lease
        is taken under: one taken later finds it idle and mounts again, behind the gate);
        ``held``: by the caller's own exclusive hold."""
        with self._cond:
            if self._leases.get(key, 0) > 0 or (key in self._exclusive and not held):
                return False
            self._active.discard(key)
            return True

    def drop(self, key: Key) -> None:
        """The session is gone (deleted) or its disk released without asking (shutdown)."""
        with self._cond:
            self._active.discard(key)
            self._used.pop(key, None)
            if key not in self._leases:
                self._gates.pop(key, None)

    def releasable(self, keys: Iterable[Key]) -> list[Key]:
        """Those of ``keys`` with no lease, least recently used first."""
        with self._cond:
            free = [k for k in keys if k not in self._leases and k not in self._exclusive]
            return sorted(free, key=lambda k: self._used.get(k, 0.0))

    def due(self, keys: Iterable[Key]) -> list[Key]:
        """Those of ``keys`` unused for ``idle_s`` (least recently used first)."""
        cutoff = self.clock() - self.idle_s
        with self._cond:
            return [k for k in self.releasable(keys) if self._used.get(k, 0.0) <= cutoff]

    @contextlib.contextmanager
    def exclusive(self, key: Key, *, wait_s: float = 0.0) -> Iterator[None]:
        """Hold the session alone: waits ``wait_s`` for the leases in flight to end, else
        ``SessionBusy``; new uses wait until the block ends."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._leases.get(key, 0) == 0 and key not in self._exclusive,
                timeout=wait_s)
            if not ok:
                raise SessionBusy("the session has a call or file operation in flight; "
                                  "try again when it ends")
            self._exclusive.add(key)
        try:
            yield
        finally:
            with self._cond:
                self._exclusive.discard(key)
                self._used[key] = self.clock()
                self._cond.notify_all()


class LeasedWorkspace(Workspace):
    """A ``Workspace`` that gives its session's lease back when it is closed."""

    on_close: Callable[[], None] | None = None

    def close(self) -> None:
        was_open = self._root_fd >= 0
        super().close()
        done, self.on_close = self.on_close, None
        if was_open and done is not None:
            done()


class Releaser(Protocol):
    activity: Activity

    def release(self, tenant_id: str, session_id: str) -> bool: ...


async def release_idle(workspaces: Releaser, *, interval_s: float | None = None) -> None:
    """Release the disks of sessions unused for ``idle_s``, forever (a background task)."""
    idle_s = workspaces.activity.idle_s
    interval = interval_s if interval_s is not None else max(0.2, min(idle_s / 4, 30.0))
    while True:
        await asyncio.sleep(interval)
        activity = workspaces.activity
        for tenant_id, session_id in activity.due(activity.active()):
            try:
                await asyncio.to_thread(workspaces.release, tenant_id, session_id)
            except Exception as exc:  # noqa: BLE001 - one session's trouble must not stop it
                log.warning("session_release_failed", tenant=tenant_id, session=session_id,
                            error=str(exc))


def call_on_loop(loop: asyncio.AbstractEventLoop,
                 make: Callable[[], Coroutine[Any, Any, Any]], *, timeout_s: float = 60.0
                 ) -> Any:
    """Run a coroutine on ``loop`` from a worker thread and wait for it; from the loop's own
    thread it is only scheduled (waiting there would deadlock)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(make())
        return None
    return asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=timeout_s)
