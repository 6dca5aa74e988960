"""Where session workspaces live on the host, and their creation and removal.

Layout: ``<data_dir>/workspaces/<tenant_id>/<session_id>/workspace`` (the bind-mount source;
beside it ``tmp``, the sandbox's /tmp: ``runtime.workspace.tmpdir``;
``runtime.workspace.disk`` puts each session on a filesystem of its own, sized by its quota).
The ``workspaces``, tenant and session directories are root-owned ``0o711``: the sandbox user
can neither list them nor replace a workspace directory with a symlink (Docker resolves
symlinks in a bind-mount source, so that directory must stay ours). Workspace directories are
``0o770`` and owned by the tenant's sandbox uid:gid so code in the container can write its
working directory; files the supervisor writes there get the same owner.

Ids are validated (``runtime.store.ids``) before they touch the file system; every directory
below the trusted ``root`` is opened ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from runtime.config import Settings
from runtime.errors import ConfigError, NotFound
from runtime.logging import get_logger
from runtime.store.ids import check_session_id, check_tenant_id
from runtime.workspace.activity import Activity, LeasedWorkspace
from runtime.workspace.disk import ARTIFACTS, NOTHING, WORKSPACE, SessionDisks, TenantBytes
from runtime.workspace.fs import DIR_FLAGS
from runtime.workspace.models import WorkspaceLimits
from runtime.workspace.mount_guard import MountGuard
from runtime.workspace.residency import Residency
from runtime.workspace.tmpdir import TMP, Root, ensure_tmp
from runtime.workspace.workspace import Workspace

log = get_logger(__name__)

_NOFOLLOW_DIR = DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC
PARENT_MODE = 0o711
SESSION_MODE = 0o770


class Workspaces:
    """Creates, opens and removes session workspaces under ``root``; which disks are mounted
    is its ``residency``'s job (``runtime.workspace.residency``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        sandbox_uid: int = 65534,
        sandbox_gid: int | None = None,
        limits: WorkspaceLimits | None = None,
        use_openat2: bool | None = None,
        disks: SessionDisks | None = None,
        activity: Activity | None = None,
        count_also: Callable[[str], int] = lambda tenant_id: 0,
        drop_containers: Callable[[str], None] = lambda session_id: None,
        tenant_limit: Callable[[str], int | None] = lambda tenant_id: None,
        elsewhere: Callable[[str], TenantBytes] = lambda tenant_id: NOTHING,
    ) -> None:
        self.root = Path(root)
        self.sandbox_uid = sandbox_uid
        self.sandbox_gid = sandbox_uid if sandbox_gid is None else sandbox_gid
        self.limits = limits or WorkspaceLimits()
        self.use_openat2 = use_openat2
        self.disks = disks or SessionDisks(self.root, enabled=False)
        # Only root can hand files to another uid; otherwise files stay ours (tests, dev).
        self._is_root = os.geteuid() == 0
        self._guard: MountGuard | None = None
        # the tenant's bytes kept outside its sessions (its tool copies): counted in its quota
        self.count_also = count_also
        # one admission against tenant quotas at a time; held to check and reserve, never for
        # a copy (``admitting``: what copies in flight will take is counted meanwhile)
        self._admission = threading.Lock()
        self._copying: dict[str, int] = {}  # tenant -> bytes admitted for copies being made
        self.activity = activity or Activity()
        self.residency = Residency(activity=self.activity, disks=self.disks,
                                   session_dir=self.session_dir, also=self.also,
                                   admission=self._admission,
                                   drop_containers=drop_containers, tenant_limit=tenant_limit,
                                   elsewhere=elsewhere)
        # what a session's use or release asks of it, by name (callers and the node's hooks)
        self.state = self.residency.state
        self.may_launch = self.residency.may_launch
        self.exclusive = self.residency.exclusive
        self.offline = self.residency.offline
        self.release = self.residency.release

    @classmethod
    def from_settings(cls, settings: Settings, *, limits: WorkspaceLimits | None = None,
                      disks_on: bool | None = None, activity: Activity | None = None,
                      count_also: Callable[[str], int] = lambda tenant_id: 0,
                      drop_containers: Callable[[str], None] = lambda session_id: None,
                      tenant_limit: Callable[[str], int | None] = lambda tenant_id: None,
                      elsewhere: Callable[[str], TenantBytes] = lambda tenant_id: NOTHING,
                      ) -> Workspaces:
        """``disks_on``: session disks off when False (None or True: when the machine can)."""
        disks = SessionDisks(settings.workspaces_dir,
                             reserve_bytes=settings.disk_reserve_mb * 1024 * 1024,
                             overcommit=settings.disk_overcommit,
                             enabled=False if disks_on is False else None)
        return cls(settings.workspaces_dir, sandbox_uid=settings.sandbox_uid, limits=limits,
                   disks=disks, activity=activity or Activity(settings.session_idle_s),
                   count_also=count_also, drop_containers=drop_containers,
                   tenant_limit=tenant_limit, elsewhere=elsewhere)

    def start(self) -> None:
        """Release what a killed instance left mounted, then guard our own mounts: they are
        released when this process ends, however it ends (``runtime.workspace.mount_guard``)."""
        if not self._is_root:
            return
        self.root.mkdir(parents=True, exist_ok=True, mode=PARENT_MODE)
        self.disks.reconcile()
        if self._guard is None:
            self._guard = MountGuard.start(self.root)
        if not self.disks.enabled:
            log.warning("session_disks_off", reason="no loop devices or mkfs.ext4: session "
                        "disk quotas are not enforced by the kernel")

    def close(self) -> None:
        """Unmount the session disks (call after the last container is gone)."""
        self.disks.close()
        for key in self.activity.active():
            self.activity.drop(key)
        if self._guard is not None:
            self._guard.stop()
            self._guard = None

    def session_dir(self, tenant_id: str, session_id: str) -> Path:
        """The session's directory (its disk's mount point). No I/O."""
        return self.root / check_tenant_id(tenant_id) / check_session_id(session_id)

    def path(self, tenant_id: str, session_id: str) -> Path:
        """Host path of a session workspace (the bind-mount source). No I/O."""
        return self.session_dir(tenant_id, session_id) / WORKSPACE

    def tmp_path(self, tenant_id: str, session_id: str) -> Path:
        """Host path of the session's /tmp (a bind-mount source; ``open`` makes it). No I/O."""
        return self.session_dir(tenant_id, session_id) / TMP

    def artifacts_dir(self, tenant_id: str, session_id: str) -> Path:
        """Full outputs of truncated runs: on the session's disk, beside its workspace."""
        return self.session_dir(tenant_id, session_id) / ARTIFACTS

    def _root_fd(self) -> int:
        self.root.mkdir(parents=True, exist_ok=True, mode=PARENT_MODE)
        return os.open(self.root, DIR_FLAGS | os.O_CLOEXEC)

    def _tenant_fd(self, tenant_id: str, *, create: bool) -> int:
        root = self._root_fd()
        try:
            if create:
                try:
                    os.mkdir(tenant_id, PARENT_MODE, dir_fd=root)
                except FileExistsError:
                    pass
            try:
                fd = os.open(tenant_id, _NOFOLLOW_DIR, dir_fd=root)
            except FileNotFoundError:
                raise NotFound("no such workspace") from None
            except OSError as exc:
                raise ConfigError("tenant workspace directory is not a directory",
                                  errno=exc.errno) from exc
            st = os.fstat(fd)
            if create and (st.st_mode & 0o022 or (os.geteuid() == 0 and st.st_uid != 0)):
                os.fchmod(fd, PARENT_MODE)
                if os.geteuid() == 0:
                    os.fchown(fd, 0, 0)
            return fd
        finally:
            os.close(root)

    def create(self, tenant_id: str, session_id: str, *, uid: int | None = None,
               disk_bytes: int | None = None, tenant_disk_bytes: int | None = None,
               elsewhere: TenantBytes = NOTHING) -> Path:
        """Create the session's disk and workspace, owned by ``uid`` (default: the configured
        sandbox uid); return the workspace's host path. ``DiskQuotaExceeded`` when the
        tenant's sessions (here, and ``elsewhere``: on the cluster's other machines) already
        hold ``tenant_disk_bytes``, ``DiskFull`` when the server's data disk could not hold
        another one."""
        owner = (uid, uid) if uid is not None else (self.sandbox_uid, self.sandbox_gid)
        size = disk_bytes if disk_bytes is not None else self.limits.max_disk_bytes
        session_dir = self.session_dir(tenant_id, session_id)
        os.close(self._tenant_fd(tenant_id, create=True))
        if tenant_disk_bytes is not None:
            self.residency.set_limit(tenant_id, tenant_disk_bytes)
        limit = self.residency.limit(tenant_id)
        with self._admission:
            self.residency.make_room(tenant_id, lambda: self.disks.admit(
                session_dir.parent, size, limit, also=self.also(tenant_id),
                elsewhere=elsewhere))
            self.disks.create(session_dir, size)
        self.activity.mark_active((tenant_id, session_id))
        session_fd = os.open(session_dir, _NOFOLLOW_DIR)
        try:
            for name, mode, who in ((WORKSPACE, SESSION_MODE, owner), (TMP, SESSION_MODE, owner),
                                    (ARTIFACTS, 0o700, (0, 0))):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=session_fd)
                fd = os.open(name, _NOFOLLOW_DIR, dir_fd=session_fd)
                try:
                    if self._is_root:
                        os.fchown(fd, *who)
                    os.fchmod(fd, mode)
                finally:
                    os.close(fd)
        finally:
            os.close(session_fd)
        log.info("workspace_created", tenant=tenant_id, session=session_id, uid=owner[0],
                 disk_mib=size // (1024 * 1024) if self.disks.enabled else None)
        return session_dir / WORKSPACE

    def also(self, tenant_id: str) -> int:
        """The tenant's bytes beside its session disks: tool copies, logs, copies in flight."""
        return self.count_also(tenant_id) + self._copying.get(tenant_id, 0)

    def tenant_bytes(self, tenant_id: str) -> TenantBytes:
        """What the tenant holds here as its quota counts it (its images and ``also``)."""
        return self.disks.tenant_bytes(self.root / check_tenant_id(tenant_id),
                                       self.also(tenant_id))

    @contextlib.contextmanager
    def admitting(self, tenant_id: str, size: int, also: int, limit: int, *,
                  data_disk: bool = False) -> Iterator[None]:
        """Admit ``size`` bytes the tenant is about to copy (a tool copy, a snapshot; ``also``:
        its other bytes beside its session disks) against its quota ``limit`` (and, with
        ``data_disk``, the data disk's room): ``DiskQuotaExceeded``/``DiskFull`` when they
        would not fit; beside what it holds on the cluster's other machines, as a mount is
        (``Residency.elsewhere``). The admission lock is held only to check and reserve: the
        copy runs without it (another tenant's session create or mount never waits for it),
        its bytes counted in every admission until the block ends."""
        tenant_dir = self.root / check_tenant_id(tenant_id)
        elsewhere = self.residency.elsewhere(tenant_id)  # other machines' (before the lock)
        with self._admission:
            also += self._copying.get(tenant_id, 0)
            if data_disk:
                self.residency.make_room(tenant_id, lambda: self.disks.admit(
                    tenant_dir, size, limit, also=also, elsewhere=elsewhere))
            else:
                self.residency.make_room(tenant_id, lambda: self.disks.admit_tenant_bytes(
                    tenant_dir, size, limit, also=also, elsewhere=elsewhere))
            self._copying[tenant_id] = self._copying.get(tenant_id, 0) + size
            self.disks.copying += size
        try:
            yield
        finally:
            with self._admission:
                left = self._copying.get(tenant_id, 0) - size
                if left > 0:
                    self._copying[tenant_id] = left
                else:
                    self._copying.pop(tenant_id, None)
                self.disks.copying -= size

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace") -> Workspace:
        """The session's ``Workspace`` (close it, or use ``with``), or with ``root="tmp"``
        its /tmp: a lease on the session, its disk mounted while any is open. ``NotFound``
        if absent. Its operations act as the sandbox uid (``runtime.workspace.actas``)."""
        key = (tenant_id, session_id)
        session_dir = self.session_dir(tenant_id, session_id)
        self.activity.take(key)
        try:
            self.residency.mount(key, session_dir)
            ws = self._open(tenant_id, session_id, root)
        except BaseException:
            self.activity.give(key)
            raise
        ws.on_close = lambda: self.activity.give(key)
        return ws

    def _open(self, tenant_id: str, session_id: str, root: Root = "workspace"
              ) -> LeasedWorkspace:
        tenant_fd = self._tenant_fd(check_tenant_id(tenant_id), create=False)
        try:
            session_fd = os.open(session_id, _NOFOLLOW_DIR, dir_fd=tenant_fd)
            try:
                fd = os.open(WORKSPACE, _NOFOLLOW_DIR, dir_fd=session_fd)
                try:
                    ensure_tmp(session_fd, fd)  # sessions made before /tmp persisted
                    if root == "tmp":
                        fd, workspace_fd = os.open(TMP, _NOFOLLOW_DIR, dir_fd=session_fd), fd
                        os.close(workspace_fd)
                except BaseException:
                    os.close(fd)
                    raise
            finally:
                os.close(session_fd)
        except FileNotFoundError:
            raise NotFound("no such workspace") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ConfigError("session workspace is not a directory") from exc
            raise
        finally:
            os.close(tenant_fd)
        st = os.fstat(fd)  # files the supervisor writes get the workspace's owner
        owner = (st.st_uid, st.st_gid) if self._is_root else None
        return LeasedWorkspace(fd, limits=self.limits, owner=owner, use_openat2=self.use_openat2,
                               own_disk=self.disks.enabled and st.st_dev != self._root_dev(),
                               acting=owner)

    def _root_dev(self) -> int:
        return os.stat(self.root).st_dev

    def verify(self, tenant_id: str, session_id: str) -> Path:
        """The host path, after checking that it is a real directory reached without
        symlinks (call right before using it as a bind-mount source)."""
        self.open(tenant_id, session_id).close()
        return self.path(tenant_id, session_id)

    def remove(self, tenant_id: str, session_id: str) -> bool:
        """Delete a session workspace and everything in it, never following a link.
        ``False`` if there was none."""
        if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux always has it
            raise RuntimeError("shutil.rmtree is not symlink-attack safe on this platform")
        self.disks.remove(self.session_dir(tenant_id, session_id))
        self.activity.drop((tenant_id, session_id))
        try:
            tenant_fd = self._tenant_fd(check_tenant_id(tenant_id), create=False)
        except NotFound:
            return False
        try:
            try:
                st = os.stat(session_id, dir_fd=tenant_fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(session_id, dir_fd=tenant_fd)
            else:
                os.unlink(session_id, dir_fd=tenant_fd)
        finally:
            os.close(tenant_fd)
        log.info("workspace_removed", tenant=tenant_id, session=session_id)
        return True
