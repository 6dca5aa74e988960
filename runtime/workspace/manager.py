"""Where session workspaces live on the host, and their creation and removal.

Layout: ``<data_dir>/workspaces/<tenant_id>/<session_id>``. The ``workspaces`` and tenant
directories are root-owned ``0o711``: the sandbox user can neither list them nor replace a
session directory with a symlink (Docker resolves symlinks in a bind-mount source, so that
directory must stay ours). Session directories are ``0o770`` and owned by the sandbox uid:gid
so code in the container can write its working directory.

Ids are validated (``runtime.store.ids``) before they touch the file system; every directory
below the trusted ``root`` is opened ``O_NOFOLLOW``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

from runtime.config import Settings
from runtime.errors import ConfigError, NotFound
from runtime.logging import get_logger
from runtime.store.ids import check_session_id, check_tenant_id
from runtime.workspace.fs import DIR_FLAGS
from runtime.workspace.models import WorkspaceLimits
from runtime.workspace.workspace import Workspace

log = get_logger(__name__)

_NOFOLLOW_DIR = DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC
PARENT_MODE = 0o711
SESSION_MODE = 0o770


class Workspaces:
    """Creates, opens and removes session workspaces under ``root``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        sandbox_uid: int = 65534,
        sandbox_gid: int | None = None,
        limits: WorkspaceLimits | None = None,
        use_openat2: bool | None = None,
    ) -> None:
        self.root = Path(root)
        self.sandbox_uid = sandbox_uid
        self.sandbox_gid = sandbox_uid if sandbox_gid is None else sandbox_gid
        self.limits = limits or WorkspaceLimits()
        self.use_openat2 = use_openat2
        # Only root can hand files to another uid; otherwise files stay ours (tests, dev).
        self._owner = (self.sandbox_uid, self.sandbox_gid) if os.geteuid() == 0 else None

    @classmethod
    def from_settings(cls, settings: Settings, *, limits: WorkspaceLimits | None = None
                      ) -> Workspaces:
        return cls(settings.workspaces_dir, sandbox_uid=settings.sandbox_uid, limits=limits)

    def path(self, tenant_id: str, session_id: str) -> Path:
        """Host path of a session workspace (the bind-mount source). No I/O."""
        return self.root / check_tenant_id(tenant_id) / check_session_id(session_id)

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

    def create(self, tenant_id: str, session_id: str) -> Path:
        """Create (idempotently) the session workspace and return its host path."""
        path = self.path(tenant_id, session_id)
        tenant_fd = self._tenant_fd(tenant_id, create=True)
        try:
            try:
                os.mkdir(session_id, 0o700, dir_fd=tenant_fd)
            except FileExistsError:
                pass
            fd = os.open(session_id, _NOFOLLOW_DIR, dir_fd=tenant_fd)
            try:
                if self._owner is not None:
                    os.fchown(fd, *self._owner)
                os.fchmod(fd, SESSION_MODE)
            finally:
                os.close(fd)
        finally:
            os.close(tenant_fd)
        log.info("workspace_created", tenant=tenant_id, session=session_id)
        return path

    def open(self, tenant_id: str, session_id: str) -> Workspace:
        """The session's ``Workspace`` (close it, or use ``with``). ``NotFound`` if absent."""
        check_session_id(session_id)
        tenant_fd = self._tenant_fd(check_tenant_id(tenant_id), create=False)
        try:
            fd = os.open(session_id, _NOFOLLOW_DIR, dir_fd=tenant_fd)
        except FileNotFoundError:
            raise NotFound("no such workspace") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ConfigError("session workspace is not a directory") from exc
            raise
        finally:
            os.close(tenant_fd)
        return Workspace(fd, limits=self.limits, owner=self._owner, use_openat2=self.use_openat2)

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
        check_session_id(session_id)
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
