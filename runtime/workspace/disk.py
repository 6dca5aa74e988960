"""Session disks: each session's files live on a filesystem of their own, sized by its quota.

Why a loop-mounted image per session: the kernel then enforces the limit (a write past it
fails with ENOSPC inside the sandbox), and a tenant can only ever fill its own images, never
the filesystem holding the audit log and the store. Project or user quotas would be cheaper
per session, but need ``CONFIG_QFMT_V2`` (ext4) or ``CONFIG_XFS_QUOTA``, which stock and
cloud kernels often lack (the development machine has neither); loop devices are everywhere.
Measured: a 1 GiB sparse image costs ≈ 7 ms of mkfs, ≈ 9 ms of mount and 664 KiB of disk.

Layout of one session (``root = <data_dir>/workspaces``)::

    root/<tenant>/<session>.img          sparse ext4 image, size = the session's quota
    root/<tenant>/<session>/             its mount point (nosuid,nodev), root 0711
                             workspace/  the sandbox's /workspace, the tenant's uid, 0770
                             artifacts/  full outputs of truncated runs, root 0700

A disk is mounted while its session is in use and released when it is idle
(``runtime.workspace.activity``); the tenant's disk quota counts a mounted image at its size
and an unmounted one at the bytes it holds (its blocks), together with the copies of user
tools its calls mount (``runtime.tools.user.objects``): ``tenant_disk_mb`` bounds what its
active sessions may grow to, and idle sessions cost what they store. The data filesystem is
kept by admission on the same basis: an image is made or mounted only while what all mounted
images may still grow by fits in its free space, less a reserve (``NAVI_DISK_RESERVE_MB``).
``NAVI_DISK_OVERCOMMIT`` > 1 relaxes both knowingly (sparse images rarely fill up); at 1, the
default, both are hard guarantees.

Mounts never outlive the supervisor: ``MountGuard`` (a child process) unmounts them when the
supervisor dies, however it dies, and ``reconcile()`` at start-up releases whatever a killed
instance left. Without root (or without loop devices) sessions are plain directories with no
kernel limit; ``navi doctor`` and the start-up log say so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from runtime.errors import DiskFull, DiskQuotaBusy, DiskQuotaExceeded, SandboxError
from runtime.logging import get_logger
from runtime.workspace.image_copy import image_lock
from runtime.workspace.leftovers import sweep_temp_files
from runtime.workspace.mount_table import mounts_under, release
from runtime.workspace.snapshot_layout import remove_all, snapshot_bytes

log = get_logger(__name__)

MiB = 1024 * 1024
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
# ext4 without reserved blocks (root gets ENOSPC too) and a 4 MiB journal (min is 1024 blocks)
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-J", "size=4", "-E",
        "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0")
WORKSPACE = "workspace"
ARTIFACTS = "artifacts"
RETRY_AFTER_S = 10  # a tenant whose quota is held by calls in flight: when to try again


class TenantBytes(NamedTuple):
    """A tenant's bytes on one machine or several, as its quota counts them: ``in_use``
    with mounted images at their size, ``at_rest`` as if none were mounted (what releasing
    idle sessions would leave). In a cluster, what it holds on the other machines is added
    to a machine's own count (``elsewhere``): the quota holds across the cluster."""

    in_use: int = 0
    at_rest: int = 0

    def plus(self, other: TenantBytes) -> TenantBytes:
        return TenantBytes(self.in_use + other.in_use, self.at_rest + other.at_rest)


NOTHING = TenantBytes()


def _image_stats(tenant_dir: Path) -> list[tuple[str, os.stat_result]]:
    """The session names and image stats of a tenant; one deleted meanwhile (a concurrent
    session delete: the soak found it as a 500 on session create) is skipped, not an error."""
    stats = []
    try:
        entries = list(os.scandir(tenant_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.name.endswith(".img"):
            with contextlib.suppress(FileNotFoundError):
                stats.append((entry.name[:-4], entry.stat(follow_symlinks=False)))
    return stats


def loop_mounts_available() -> bool:
    return (os.geteuid() == 0 and os.path.exists("/dev/loop-control")
            and shutil.which("mkfs.ext4") is not None)


def _run(argv: list[str] | tuple[str, ...]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"{argv[0]} failed: {done.stderr.strip() or done.returncode}")


class SessionDisks:
    """Makes, mounts, measures and removes session images under ``root``."""

    def __init__(self, root: Path, *, reserve_bytes: int = 1024 * MiB,
                 overcommit: float = 1.0, enabled: bool | None = None) -> None:
        self.root = root
        self.reserve_bytes = reserve_bytes
        self.overcommit = overcommit
        self.enabled = loop_mounts_available() if enabled is None else enabled
        self._mounted: set[Path] = set()
        self._lock = threading.Lock()
        self.copying = 0  # bytes admitted for copies being made (snapshots, tool copies)

    def image(self, session_dir: Path) -> Path:
        return session_dir.with_name(session_dir.name + ".img")

    # -- admission ------------------------------------------------------------------------

    def tenant_allocated(self, tenant_dir: Path, *, idle: bool = False) -> int:
        """Bytes the tenant's session images count: a mounted one its size, another what it
        holds (``idle``: as if none were mounted); their snapshots at what they hold."""
        return sum(st.st_size if not idle and tenant_dir / name in self._mounted
                   else st.st_blocks * 512 for name, st in _image_stats(tenant_dir)
                   ) + snapshot_bytes(tenant_dir)

    def tenant_bytes(self, tenant_dir: Path, also: int) -> TenantBytes:
        """What the tenant's images here (and ``also``) count in its quota, in use and at
        rest (told to the machine admitting its next session disk in a cluster)."""
        return TenantBytes(self.tenant_allocated(tenant_dir) + also,
                           self.tenant_allocated(tenant_dir, idle=True) + also)

    def mount_growth(self, session_dir: Path) -> int:
        """What mounting the session's disk adds to the counts: its size less what it holds
        (0 when it is mounted, or has no image)."""
        if not self.enabled or session_dir in self._mounted:
            return 0
        try:
            st = os.stat(self.image(session_dir), follow_symlinks=False)
        except FileNotFoundError:
            return 0
        return max(0, st.st_size - st.st_blocks * 512)

    def is_mounted(self, session_dir: Path) -> bool:
        return session_dir in self._mounted

    def _growth_left(self) -> int:
        """What the mounted images may still write: their sizes less what they hold (idle
        ones cannot grow: only the mounted are looked at, however many sessions there are)."""
        total = 0
        for session_dir in list(self._mounted):
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(self.image(session_dir), follow_symlinks=False)
                total += max(0, st.st_size - st.st_blocks * 512)
        return total

    def admit(self, tenant_dir: Path, size: int, tenant_limit: int, *, also: int = 0,
              elsewhere: TenantBytes = NOTHING) -> None:
        """``DiskQuotaExceeded`` past the tenant's quota (``also``: its other bytes, the
        tool copies; ``elsewhere``: what it holds on the cluster's other machines),
        ``DiskFull`` when the data filesystem could not hold what the images may grow to."""
        if not self.enabled:
            return
        self.admit_tenant_bytes(tenant_dir, size, tenant_limit, also=also, elsewhere=elsewhere)
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        if (self._growth_left() + self.copying + size) > \
                (free - self.reserve_bytes) * self.overcommit:
            raise DiskFull("the server's data disk has no room for another session; "
                           "ask the operator to free space")

    def admit_tenant_bytes(self, tenant_dir: Path, size: int, tenant_limit: int, *,
                           also: int, elsewhere: TenantBytes = NOTHING) -> None:
        """``DiskQuotaExceeded`` unless ``size`` more bytes fit in the tenant's quota beside
        its images, ``also`` and ``elsewhere`` (checked whether or not sessions have
        disks); ``DiskQuotaBusy`` when they would fit once its sessions in use are idle."""
        allocated = self.tenant_allocated(tenant_dir) + also + elsewhere.in_use
        if allocated + size > tenant_limit * self.overcommit:
            if self.tenant_allocated(tenant_dir, idle=True) + also + elsewhere.at_rest + size \
                    <= tenant_limit * self.overcommit:
                raise DiskQuotaBusy(
                    f"the tenant's disk quota of {tenant_limit // MiB} MiB is held by its "
                    "sessions in use; try again when a call ends", retry_after=RETRY_AFTER_S,
                    limit=tenant_limit)
            raise DiskQuotaExceeded(
                f"the tenant's disk quota of {tenant_limit // MiB} MiB is taken by its sessions "
                f"and tool copies ({allocated // MiB} MiB); delete a session first",
                limit=tenant_limit)

    # -- life cycle -----------------------------------------------------------------------

    def create(self, session_dir: Path, size: int) -> None:
        """Make and mount the session's image (the caller made the tenant dir and checked
        ``admit``); the mount point ends up root-owned 0711 with nothing in it but ours."""
        if not self.enabled:
            session_dir.mkdir(mode=0o711, exist_ok=True)
            return
        image = self.image(session_dir)
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        try:
            _run((*MKFS, str(image)))
            session_dir.mkdir(mode=0o711, exist_ok=True)
            self.ensure_mounted(session_dir)
            (session_dir / "lost+found").rmdir()
        except BaseException:
            self.remove(session_dir)
            raise

    def ensure_mounted(self, session_dir: Path) -> None:
        """Mount the session's image if it is not (after a restart: on first use)."""
        if not self.enabled or session_dir in self._mounted:
            return
        image = self.image(session_dir)
        with self.image_lock(session_dir), self._lock:
            if session_dir in self._mounted:
                return
            if not image.is_file() or image.is_symlink():
                return  # no image: a directory made without loop mounts
            if str(session_dir) not in mounts_under(session_dir.parent):
                _run(("mount", "-o", MOUNT_OPTIONS, str(image), str(session_dir)))
                os.chmod(session_dir, 0o711)
                sweep_temp_files(session_dir)  # a killed supervisor's half-written uploads
            self._mounted.add(session_dir)

    @contextlib.contextmanager
    def image_lock(self, session_dir: Path) -> Iterator[None]:
        """The image's cross-process lock (``image_copy.image_lock``) while its mount changes:
        ``navi backup`` and snapshots copy it under the same lock; none without an image."""
        if not self.image(session_dir).is_file():
            yield
            return
        with image_lock(session_dir):
            yield

    def unmount(self, session_dir: Path) -> None:
        """Release the session's mount (the image stays); lazily: a leaving container may
        still hold it, and the loop device goes with its last user."""
        with self.image_lock(session_dir), self._lock:
            self._mounted.discard(session_dir)
            if str(session_dir) in mounts_under(session_dir.parent):
                release(str(session_dir))

    def remove(self, session_dir: Path) -> None:
        """Unmount (lazily: a container may still be leaving) and delete the image, all under
        the image lock: a snapshot or restore waiting for it then finds no image (404), never
        writes an image or snapshot back for a deleted session."""
        with self.image_lock(session_dir):
            with self._lock:
                self._mounted.discard(session_dir)
                for point in mounts_under(session_dir.parent):
                    if point == str(session_dir):
                        release(point)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.image(session_dir))
            remove_all(session_dir)  # its snapshots go with it

    def free_bytes(self, workspace_fd: int) -> int | None:
        """What the session can still store, or ``None`` when it has no disk of its own."""
        if not self.enabled:
            return None
        st = os.fstatvfs(workspace_fd)
        return st.f_bavail * st.f_frsize

    def reconcile(self) -> int:
        """Release every mount under ``root`` (a killed instance's); how many there were."""
        points = mounts_under(self.root)
        for point in sorted(points, key=len, reverse=True):
            release(point)
        if points:
            log.warning("stale_mounts_released", count=len(points), root=str(self.root))
        return len(points)

    def close(self) -> None:
        """Unmount everything this process mounted (the images stay for the next start)."""
        with self._lock:
            for point in sorted(map(str, self._mounted), key=len, reverse=True):
                release(point)
            self._mounted.clear()
