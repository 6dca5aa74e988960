"""Content-addressed copies of user tools: what a sandbox mounts, made only for admitted calls.

Why copies: a call must run exactly the bytes its intent's ``tool_hash`` names, while
``write_tool`` may replace the tool's file at any moment; the copy is immutable and named by
its SHA-256. Why this module: copies take disk space a tenant could otherwise pile up without
bound, so they are

- made only after the call is admitted (quota and policy), by the Executor's invocation step;
- kept per tenant (``<data>/tools/.objects/<tenant>/<sha256>.py``) and counted in that
  tenant's disk quota (``tenant_disk_mb``, together with its session disks): a tenant at its
  quota is refused before a copy is written. Per tenant rather than shared, so that each
  byte is charged to exactly one tenant and one tenant's deletions never touch another's
  mounts (a shared copy would need cross-tenant reference counts; a copy is at most 64 KiB);
- removed when nothing refers to them: neither a current version of the tenant's tools (its
  own or a shipped one) nor a call in flight. A call holds a reference from before its copy
  is looked at until its run has ended (``acquire``/``release``); ``collect`` (after
  ``write_tool``, ``delete_tool`` and at start-up) removes the rest and remembers what is
  current, and a copy that is not (in use at that moment, or made afterwards by a call
  that read its bytes before a ``write_tool``: the version its approval named) goes when
  its last call releases it.

One lock per tenant orders ``acquire`` (admit, write, count) against ``collect``, so a copy
a call is about to mount is never removed under it.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from runtime.errors import DiskQuotaExceeded
from runtime.logging import get_logger
from runtime.tools.user.descriptor import MAX_TOOL_BYTES, content_hash

log = get_logger(__name__)

OBJECTS_DIR = ".objects"  # under <data>/tools; never a tenant id (those start alphanumeric)
_OBJECT = re.compile(r"^[0-9a-f]{64}\.py$")
BLOCK = 4096
DiskAdmit = Callable[[str, int, int], AbstractContextManager[None]]
"""``(tenant, size, bytes of the tenant's copies)``: raises when ``size`` more would not fit
in the tenant's disk quota (``DiskQuotaExceeded``), else holds the quota's books while the
copy is written."""


def objects_root(data_dir: Path) -> Path:
    """Where the tenants' tool copies live (``ToolObjects``' root)."""
    return Path(data_dir).resolve() / "tools" / OBJECTS_DIR


def tenant_copy_bytes(root: Path, tenant_id: str) -> int:
    """Disk a tenant's copies under ``root`` take (what its quota counts; the session disks
    count it before the tool store exists)."""
    total = 0
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(root / tenant_id):
            with contextlib.suppress(FileNotFoundError):
                total += charged_bytes(entry.stat(follow_symlinks=False))
    return total


class TenantDisk(Protocol):
    """Who keeps a tenant's disk quota (the session disks' keeper, ``Workspaces``)."""

    def admitting(self, tenant_id: str, size: int, also: int, limit: int
                  ) -> AbstractContextManager[None]:
        """``DiskQuotaExceeded`` unless ``size`` more bytes fit in ``limit`` beside the
        tenant's sessions and ``also`` (bytes of its own it does not see); else no other
        admission of the tenant's disk runs until the block is left."""
        ...


@contextlib.contextmanager
def admit_alone(tenant_id: str, size: int, also: int, limit: int) -> Iterator[None]:
    """The quota check without session disks (no keeper given: tests, `navi exec`)."""
    if also + size > limit:
        raise DiskQuotaExceeded(
            f"the tenant's disk quota of {limit // (1024 * 1024)} MiB is used up; delete "
            "a session or a tool first", limit=limit)
    yield


def charged_bytes(st: os.stat_result) -> int:
    """What one file costs on disk: its allocated blocks, never less than its length."""
    return max(st.st_size, st.st_blocks * 512)


class ToolObjects:
    """The per-tenant copies under ``root`` (``<data>/tools/.objects``). Blocking I/O: call
    through ``asyncio.to_thread``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._refs: dict[tuple[str, str], int] = {}
        self._current: dict[str, set[str]] = {}  # tenant -> SHA-256s its last collect kept
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, tenant_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tenant_id, threading.Lock())

    def tenant_dir(self, tenant_id: str) -> Path:
        return self.root / tenant_id

    def tenant_bytes(self, tenant_id: str) -> int:
        """Disk the tenant's copies take (what its quota counts)."""
        return tenant_copy_bytes(self.root, tenant_id)

    def acquire(self, tenant_id: str, source: bytes, admit: DiskAdmit) -> Path:
        """The copy of ``source`` (verified bytes), made if absent after ``admit`` let it
        in; the caller holds a reference until ``release``."""
        with self._lock(tenant_id):
            digest = content_hash(source)
            key = (tenant_id, digest)
            directory = self.tenant_dir(tenant_id)
            name = f"{digest}.py"
            path = directory / name
            if not _intact(path, digest):
                size = -(-len(source) // BLOCK) * BLOCK  # what it will take on disk
                with admit(tenant_id, size, self.tenant_bytes(tenant_id)):
                    self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
                    directory.mkdir(mode=0o700, exist_ok=True)
                    _write_copy(directory, name, source)
            self._refs[key] = self._refs.get(key, 0) + 1
        return path

    def release(self, tenant_id: str, path: Path) -> None:
        """The call that acquired ``path`` has ended; a copy that is no longer current
        goes with its last call."""
        key = (tenant_id, path.name.removesuffix(".py"))
        with self._lock(tenant_id):
            left = self._refs.get(key, 0) - 1
            if left > 0:
                self._refs[key] = left
                return
            self._refs.pop(key, None)
            current = self._current.get(tenant_id)
            if current is not None and key[1] not in current:
                _unlink(path)

    def collect(self, tenant_id: str, current: Iterable[str]) -> int:
        """Remove the tenant's copies that are not ``current`` (SHA-256s) and not in use;
        those in use are removed when released. Returns how many were removed."""
        keep = set(current)
        removed = 0
        with self._lock(tenant_id):
            self._current[tenant_id] = keep
            try:
                names = os.listdir(self.tenant_dir(tenant_id))
            except (FileNotFoundError, NotADirectoryError):
                return 0
            for name in names:
                digest = name.removesuffix(".py")
                if _OBJECT.fullmatch(name) and digest in keep:
                    continue
                if self._refs.get((tenant_id, digest), 0) > 0:
                    continue  # goes when released
                _unlink(self.tenant_dir(tenant_id) / name)
                removed += 1
        if removed:
            log.info("tool_copies_removed", tenant_id=tenant_id, removed=removed)
        return removed

    def tenants(self) -> list[str]:
        """Tenants with a copies directory; loose files (an older, shared layout) are
        removed on the way: nothing refers to them any more."""
        found = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                found.append(entry.name)
            else:
                _unlink(Path(entry.path))
        return found


def _intact(path: Path, digest: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        with os.fdopen(fd, "rb") as fh:
            return content_hash(fh.read(MAX_TOOL_BYTES + 1)) == digest
    except OSError:
        return False


def _write_copy(directory: Path, name: str, data: bytes) -> None:
    """Absent or damaged: (re)made whole (temp file, fsync, rename, fsync dir), read-only."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    tmp = f".{name}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
