"""Session disks mounted while in use: ``Residency``, the collaborator of ``Workspaces`` that
mounts, releases and makes room (sessions at rest cost no mount: docs/sessions.md; the
leases are ``activity``'s).

A use mounts the session's disk, admitted against the tenant's quota and the data disk as a
mounted disk counts (``disk``); when it does not fit, the least recently used session with
nothing in flight is released first (its warm containers, then its mount), and only then is
it a 429 ``disk_quota``. Lock order: a session's gate, then the admission lock; a release
for room only ever tries another session's gate (never waits for it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from runtime.errors import DiskFull, DiskQuotaBusy
from runtime.logging import get_logger
from runtime.workspace.activity import Activity, Key
from runtime.workspace.disk import NOTHING, SessionDisks, TenantBytes

log = get_logger(__name__)


class Residency:
    """Which session disks are mounted, for one ``Workspaces``: mounts on use, releases when
    idle or for room, and the tenants' quotas a mount is admitted against.

    ``session_dir``: a session's directory (its disk's mount point); ``also``: a tenant's
    bytes beside its session disks; ``admission``: the lock every admission against tenant
    quotas takes (shared with the session creates and copies of ``Workspaces``).
    ``drop_containers`` (a session's warm containers removed: they bind-mount its workspace)
    and ``tenant_limit`` (a tenant's disk quota in bytes, for mounts after a restart) are the
    machine's (``runtime.nodes.machine``); by default there is nothing to drop and no limit.
    ``elsewhere``: what a tenant holds on a cluster's other machines, asked (blocking) before
    a mount or copy is admitted; a cluster node's agent gives it (``runtime.cluster.agent.
    asks``), one machine has nothing elsewhere.
    """

    def __init__(self, *, activity: Activity, disks: SessionDisks,
                 session_dir: Callable[[str, str], Path], also: Callable[[str], int],
                 admission: threading.Lock,
                 drop_containers: Callable[[str], None] = lambda session_id: None,
                 tenant_limit: Callable[[str], int | None] = lambda tenant_id: None,
                 elsewhere: Callable[[str], TenantBytes] = lambda tenant_id: NOTHING) -> None:
        self.activity = activity
        self.disks = disks
        self.session_dir = session_dir
        self.also = also
        self.admission = admission
        self.drop_containers = drop_containers
        self.tenant_limit = tenant_limit
        self._limits: dict[str, int] = {}
        self.elsewhere = elsewhere

    def state(self, tenant_id: str, session_id: str) -> str:
        """``active`` while the session's disk is mounted (in use lately), else ``idle``."""
        return "active" if self.activity.is_active((tenant_id, session_id)) else "idle"

    def may_launch(self, tenant_id: str, session_id: str) -> bool:
        """Whether a warm container may be made for the session now (the backend asks before
        each refill): not while its disk is released, being released or held offline."""
        return self.activity.may_launch((tenant_id, session_id))

    def exclusive(self, tenant_id: str, session_id: str, *, wait_s: float = 0.0
                  ) -> contextlib.AbstractContextManager[None]:
        """Hold the session with no call or file operation in flight (``SessionBusy``
        after ``wait_s``); new ones wait until the block ends. Its disk stays as it was."""
        return self.activity.exclusive((tenant_id, session_id), wait_s=wait_s)

    @contextlib.contextmanager
    def offline(self, tenant_id: str, session_id: str, *, wait_s: float = 0.0
                ) -> Iterator[Path]:
        """The session held exclusively with its disk released (warm containers gone,
        unmounted): yields its directory, e.g. to swap its image; the next use mounts it."""
        key = (tenant_id, session_id)
        session_dir = self.session_dir(tenant_id, session_id)
        with self.activity.exclusive(key, wait_s=wait_s), self.activity.gate(key):
            self.drop_containers(session_id)
            self.activity.retire(key, held=True)
            self.disks.unmount(session_dir)
            yield session_dir

    def release(self, tenant_id: str, session_id: str, *, only_idle: bool = True) -> bool:
        """Release the session's disk if nothing uses it (``only_idle``: and it was unused
        for ``NAVI_SESSION_IDLE_S``); whether it was released."""
        key = (tenant_id, session_id)
        with self.activity.gate(key):
            if not self.activity.is_active(key):
                return False
            if only_idle and not self.activity.due([key]):
                return False
            return self._release_held(key)

    def _release_held(self, key: Key) -> bool:
        """Release with the session's gate held: warm containers first (they bind-mount the
        workspace), then the disk, unless a lease came meanwhile."""
        if not self.activity.begin_release(key):  # no warm container is made from here
            return False
        try:
            self.drop_containers(key[1])
            if not self.activity.retire(key):
                return False
            self.disks.unmount(self.session_dir(*key))
        finally:
            self.activity.end_release(key)
        log.info("session_released", tenant=key[0], session=key[1])
        return True

    def mount(self, key: Key, session_dir: Path) -> None:
        """The session's disk mounted (admitted first, making room if need be)."""
        if self.activity.is_active(key):  # checked after the lease: a release waits for it
            return
        with self.activity.gate(key):
            if self.activity.is_active(key):
                return
            growth = self.disks.mount_growth(session_dir)
            if growth:
                limit = self.limit(key[0])
                elsewhere = self.elsewhere(key[0])  # asked before the lock: may take a hop
                with self.admission:
                    self.make_room(key[0], lambda: self.disks.admit(
                        session_dir.parent, growth, limit, also=self.also(key[0]),
                        elsewhere=elsewhere), exclude=key)
                    self.disks.ensure_mounted(session_dir)
            else:
                self.disks.ensure_mounted(session_dir)
            if session_dir.is_dir():
                self.activity.mark_active(key)

    def set_limit(self, tenant_id: str, limit: int) -> None:
        """The tenant's disk quota in bytes, as known at a session's create."""
        self._limits[tenant_id] = limit

    def limit(self, tenant_id: str) -> int:
        """The tenant's disk quota in bytes (``tenant_limit``'s answer, kept; unknown: none)."""
        if tenant_id not in self._limits:
            found = self.tenant_limit(tenant_id)
            if found is None:
                return 2**62
            self._limits[tenant_id] = found
        return self._limits[tenant_id]

    def make_room(self, tenant_id: str, admit: Callable[[], None], *,
                   exclude: Key | None = None) -> None:
        """Run ``admit``; while it fails for want of room that releasing a session would
        make, release the least recently used one with nothing in flight (the tenant's for
        its quota, any for the data disk) and try again."""
        while True:
            try:
                admit()
                return
            except DiskQuotaBusy as exc:
                err: DiskQuotaBusy | DiskFull = exc
                pool = [k for k in self.activity.active() if k[0] == tenant_id]
            except DiskFull as exc:
                err = exc
                pool = self.activity.active()
            if not self._release_one([k for k in pool if k != exclude]):
                raise err

    def _release_one(self, pool: list[Key]) -> bool:
        for key in self.activity.releasable(pool):
            gate = self.activity.gate(key)
            if not gate.acquire(blocking=False):
                continue  # being mounted or released: not ours to wait for (lock order)
            try:
                if self.activity.is_active(key) and self._release_held(key):
                    return True
            finally:
                gate.release()
        return False
