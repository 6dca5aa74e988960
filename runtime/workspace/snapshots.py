"""Snapshots of a session's disk: taken, listed, restored, deleted, and copied into a fork.

Why whole-image copies: a session's files live on an ext4 image of their own
(``runtime.workspace.disk``), so a copy of the image is every file, mode, owner, link and
hole at once, ``/workspace`` and ``/tmp`` alike, with nothing to walk. The data filesystem
cannot share blocks (ext4: no reflink), so a snapshot is a sparse copy taken with the
session's filesystem frozen (``runtime.workspace.image_copy``): it costs the bytes the session
holds. Measured on this machine (2 shared cores): a 1 GiB session holding 100 MiB copies in
75–150 ms into 100.7 MiB (an empty one 2–5 ms, 0.7 MiB); over the API, with the audit
record and the quota, a snapshot takes 125–310 ms, a restore 120–200 ms, a fork 145–165 ms.

Where snapshots are kept is ``runtime.workspace.snapshot_layout`` (below the disk, which
counts and removes them). Crash-safe without the store: an image is written as ``.part`` and
renamed when whole, its metadata written the same way afterwards; a snapshot exists when both
do, and leftovers of a crash are swept under the image lock. Snapshots count in the tenant's
disk quota at their allocated bytes and go with their session (``snapshot_layout``).

Taking a snapshot holds a lease (the disk stays mounted, no restore meanwhile; a call in
flight only waits out the freeze). Restoring holds the session alone (``SessionBusy`` while
a call or file operation is in flight): its warm containers go, its disk is unmounted, the
snapshot's copy is renamed over the image, and the next use mounts it: no call sees half a
restore. What the image grows by is admitted against the tenant's quota first, as a
snapshot's copy is (else restoring a full snapshot over an emptied session went past it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.audit.mirror import fsync_dir
from runtime.errors import Conflict, NotFound
from runtime.logging import get_logger
from runtime.workspace.image_copy import (
    PART,
    copy_file_sparse,
    copy_image_locked,
    image_lock,
    image_of,
    snapshots_dir,
)

if TYPE_CHECKING:
    from runtime.workspace.manager import Workspaces

log = get_logger(__name__)

SNAPSHOT_ID = re.compile(r"sn_[0-9a-f]{16}")
Admit = Callable[[int], contextlib.AbstractContextManager[None]]


@dataclass(frozen=True)
class Snapshot:
    id: str
    name: str | None
    created_at: float
    bytes: int


def new_snapshot_id() -> str:
    return "sn_" + secrets.token_hex(8)


def room_for(workspaces: Workspaces, tenant_id: str, limit: int) -> Admit:
    """``admit`` for ``create``/``restore``: holds room for ``need`` more bytes in the tenant's
    quota ``limit`` (its least recently used idle-able session released first if that makes
    room) and on the data disk, beside the reserve and what mounted session disks may still
    grow by (``DiskFull``: a copy there would take what their writes were promised)."""

    def admit(need: int) -> contextlib.AbstractContextManager[None]:
        return workspaces.admitting(tenant_id, need, workspaces.count_also(tenant_id), limit,
                                    data_disk=True)

    return admit


def check_snapshot_id(value: str) -> str:
    if not SNAPSHOT_ID.fullmatch(value):
        raise NotFound("no such snapshot")  # never a path: a malformed id names nothing
    return value


def _write_json(path: Path, value: dict[str, object]) -> None:
    part = path.with_name(path.name + PART)
    with open(part, "w", encoding="utf-8") as fh:
        json.dump(value, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(part, path)
    fsync_dir(path.parent)


def _read(meta: Path) -> Snapshot | None:
    try:
        raw = json.loads(meta.read_text(encoding="utf-8"))
        found = Snapshot(id=str(raw["id"]), name=raw.get("name"),
                         created_at=float(raw["created_at"]), bytes=int(raw["bytes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if found.id != meta.stem or not meta.with_suffix(".img").is_file():
        return None
    return found


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


@contextlib.contextmanager
def _session_locked(session_dir: Path) -> Iterator[None]:
    """``image_lock`` on a session that still has its image: one deleted meanwhile (its
    removal took the lock first) is ``NotFound``."""
    with image_lock(session_dir):
        if not image_of(session_dir).is_file():
            raise NotFound("no such session")
        yield


def _sweep(folder: Path) -> None:
    """Leftovers of a crash (call with the image lock held): parts, and images or
    metadata without their other half."""
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            name = entry.name
            stem, _, ext = name.partition(".")
            orphan = ext == "img" and not (folder / f"{stem}.json").exists() or \
                ext == "json" and not (folder / f"{stem}.img").exists()
            if name.endswith(PART) or orphan:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


class Snapshots:
    """The snapshot store of ``workspaces``' sessions (blocking: run in a worker thread)."""

    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces

    def _paths(self, tenant_id: str, session_id: str) -> tuple[Path, Path]:
        session_dir = self.workspaces.session_dir(tenant_id, session_id)
        return session_dir, snapshots_dir(session_dir)

    def list(self, tenant_id: str, session_id: str) -> list[Snapshot]:
        """The session's snapshots, oldest first."""
        _, folder = self._paths(tenant_id, session_id)
        found = [s for s in map(_read, folder.glob("sn_*.json")) if s is not None]
        return sorted(found, key=lambda s: (s.created_at, s.id))

    def get(self, tenant_id: str, session_id: str, snapshot_id: str) -> Snapshot:
        _, folder = self._paths(tenant_id, session_id)
        found = _read(folder / f"{check_snapshot_id(snapshot_id)}.json")
        if found is None:
            raise NotFound("no such snapshot")
        return found

    def create(self, tenant_id: str, session_id: str, name: str | None, *, admit: Admit,
               snapshot_id: str | None = None) -> Snapshot:
        """Snapshot the session's disk; ``admit(bytes)`` holds the tenant's quota for the
        copy while it is made (``DiskQuotaExceeded``: nothing is written)."""
        sid = check_snapshot_id(snapshot_id or new_snapshot_id())
        session_dir, folder = self._paths(tenant_id, session_id)
        if not self.workspaces.disks.enabled:
            raise Conflict("snapshots need session disks (loop devices), which this server "
                           "does not have")
        with self.workspaces.open(tenant_id, session_id):  # a lease: mounted, no restore
            try:
                need = _allocated(image_of(session_dir))
            except FileNotFoundError:  # the session was deleted meanwhile
                raise NotFound("no such session") from None
            with admit(need), _session_locked(session_dir):  # the order mounts take them in
                _sweep(folder)
                stats = copy_image_locked(session_dir, folder / f"{sid}.img")
                snap = Snapshot(id=sid, name=name, created_at=time.time(),
                                bytes=stats.allocated)
                _write_json(folder / f"{sid}.json", asdict(snap))
        log.info("snapshot_created", tenant=tenant_id, session=session_id, snapshot=sid,
                 bytes=stats.allocated, ms=round(stats.ms, 1))
        return snap

    def delete(self, tenant_id: str, session_id: str, snapshot_id: str) -> None:
        self.get(tenant_id, session_id, snapshot_id)
        session_dir, folder = self._paths(tenant_id, session_id)
        with _session_locked(session_dir):
            self.get(tenant_id, session_id, snapshot_id)  # not deleted meanwhile
            for ext in ("json", "img"):  # metadata first: no half snapshot is ever listed
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / f"{snapshot_id}.{ext}")
            fsync_dir(folder)
        log.info("snapshot_deleted", tenant=tenant_id, session=session_id,
                 snapshot=snapshot_id)

    def restore(self, tenant_id: str, session_id: str, snapshot_id: str, *,
                admit: Admit) -> None:
        """Make the session's files exactly the snapshot's (``SessionBusy`` while in use);
        ``admit(bytes)`` holds the tenant's quota for what the session's image grows by
        (``DiskQuotaExceeded``: the session stays as it was)."""
        self.get(tenant_id, session_id, snapshot_id)
        session_dir, folder = self._paths(tenant_id, session_id)
        with self.workspaces.offline(tenant_id, session_id):
            source, image = folder / f"{snapshot_id}.img", image_of(session_dir)
            try:
                need = max(0, _allocated(source) - _allocated(image))
            except FileNotFoundError:  # deleted meanwhile (the snapshot or its session)
                raise NotFound("no such snapshot") from None
            with admit(need), _session_locked(session_dir):  # the order mounts take them in
                self.get(tenant_id, session_id, snapshot_id)  # not deleted meanwhile
                stats = copy_file_sparse(source, image)
        log.info("snapshot_restored", tenant=tenant_id, session=session_id,
                 snapshot=snapshot_id, ms=round(stats.ms, 1))

    def copy_into(self, tenant_id: str, source_id: str, snapshot_id: str | None,
                  target_id: str) -> None:
        """Give the (new, unused) session ``target_id`` the files of ``source_id``: those of
        its snapshot, or its disk as it is now (a frozen copy)."""
        source_dir, folder = self._paths(tenant_id, source_id)
        target = image_of(self.workspaces.session_dir(tenant_id, target_id))
        if not self.workspaces.disks.enabled:
            raise Conflict("forks need session disks (loop devices), which this server "
                           "does not have")
        with self.workspaces.offline(tenant_id, target_id):
            if snapshot_id is not None:
                with _session_locked(source_dir):
                    self.get(tenant_id, source_id, snapshot_id)
                    copy_file_sparse(folder / f"{snapshot_id}.img", target)
            else:
                with self.workspaces.open(tenant_id, source_id), _session_locked(source_dir):
                    copy_image_locked(source_dir, target)
