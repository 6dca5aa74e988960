"""`navi restore` on a node: a backup's images put back on the node that holds the session.

Two phases, so a restore across nodes is all or nothing up to its last step:

1. stage: the control plane names the session and the image (`RestoreImage`: its disk, or
   a snapshot by id, the manifest's digest, and the id of this restore) and sends the bytes
   of its data ranges by handle; the agent writes them into a part file beside the target
   in its own data dir (``<image>.restore-<restore id>-<random>``, same filesystem, so the
   swap is a rename), and on ``end`` checks its contents against the digest
   (``sparse_sha256``) and keeps it aside under the restore's id. Nothing live is touched.
2. finish (`RestoreFinish`): commit renames every staged image of that restore into place,
   a session disk with the session held offline (its warm containers gone, its disk
   unmounted; the next use mounts the restored image), a snapshot's image with its
   description; discard deletes them.

Staged images live in this agent's memory: a restore its control plane never finishes is
dropped after `STAGED_TTL_S` (on the next restore), and part files an earlier agent process
left are deleted when the agent starts. Nothing in a request is a path. Blocking methods:
the agent calls them on a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.backup_disks import sparse_sha256
from runtime.errors import InvalidInput, NotFound
from runtime.logging import get_logger
from runtime.nodes.snapshot_wire import RestoreFinish, RestoreImage
from runtime.nodes.wire import parsed
from runtime.workspace.image_copy import image_lock, image_of, snapshots_dir
from runtime.workspace.snapshots import Snapshot, _write_json

if TYPE_CHECKING:
    from runtime.workspace.manager import Workspaces

log = get_logger(__name__)
DIR_MODE = 0o711  # as the server makes a tenant's folder and a session's mount point
PART = ".restore-"
STAGED_TTL_S = 3600.0
OFFLINE_WAIT_S = 10.0  # phase 2 waits this long for a session's call to end


@dataclass
class _Restore:
    want: RestoreImage
    part: Path
    target: Path
    fd: int


@dataclass
class _Staged:
    images: list[_Restore]
    touched: float


class NodeRestores:
    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self._open: dict[str, _Restore] = {}
        self._staged: dict[str, _Staged] = {}
        self._lock = threading.Lock()
        _sweep_parts(workspaces.root)

    def open(self, payload: object) -> str:
        want = parsed(RestoreImage, payload)
        self._expire()
        session_dir = self.workspaces.session_dir(want.tenant, want.session)
        _mkdir(session_dir.parent, DIR_MODE)
        if want.kind == "session":
            target = image_of(session_dir)
        else:
            target = snapshots_dir(session_dir) / f"{want.snapshot}.img"
            _mkdir(target.parent, 0o700)
        part = target.with_name(f"{target.name}{PART}{want.restore}-{secrets.token_hex(4)}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.ftruncate(fd, want.size)
        handle = secrets.token_hex(8)
        self._open[handle] = _Restore(want, part, target, fd)
        return handle

    def write(self, handle: object, offset: object, data: object) -> None:
        found = self._open.get(handle) if isinstance(handle, str) else None
        if found is None:
            raise NotFound("no such restore")
        if not (isinstance(offset, int) and isinstance(data, bytes)) or offset < 0 or \
                offset + len(data) > found.want.size:
            raise InvalidInput("restore data outside its image")
        os.pwrite(found.fd, data, offset)

    def end(self, handle: object, commit: object) -> None:
        """Phase 1's end of one image: staged once its digest is the manifest's (``commit``
        True), else dropped. Nothing is replaced here."""
        found = self._open.pop(handle, None) if isinstance(handle, str) else None
        if found is None:
            raise NotFound("no such restore")
        try:
            if commit is True:
                os.fsync(found.fd)
        finally:
            os.close(found.fd)
        if commit is not True or sparse_sha256(found.part) != found.want.sha256:
            found.part.unlink(missing_ok=True)
            if commit is True:
                raise InvalidInput(f"the image of session {found.want.session} differs from "
                                   "the backup's digest")
            return
        with self._lock:
            staged = self._staged.setdefault(found.want.restore, _Staged([], 0.0))
            staged.images.append(found)
            staged.touched = time.monotonic()

    def finish(self, payload: object) -> int:
        """Phase 2: every image staged under the restore put in place (or dropped); how
        many were. A commit with nothing staged (the agent restarted since) is NotFound."""
        want = parsed(RestoreFinish, payload)
        with self._lock:
            staged = self._staged.pop(want.restore, None)
        if staged is None:
            if want.commit:
                raise NotFound("nothing staged for this restore on the node (its agent "
                               "restarted, or the restore was left unfinished too long)")
            return 0
        placed = 0
        failed: Exception | None = None
        for image in staged.images:
            if want.commit and failed is None:
                try:
                    self._place(image)
                    placed += 1
                except Exception as exc:  # the rest are dropped, the error raised
                    failed = exc
                    log.warning("restore_place_failed", restore=want.restore,
                                session=image.want.session, placed=placed, error=str(exc))
            image.part.unlink(missing_ok=True)
        if failed is not None:
            raise failed
        return placed if want.commit else len(staged.images)

    def _expire(self) -> None:
        cutoff = time.monotonic() - STAGED_TTL_S
        with self._lock:
            old = [k for k, v in self._staged.items() if v.touched < cutoff]
            dropped = [self._staged.pop(k) for k in old]
        for staged in dropped:
            for image in staged.images:
                image.part.unlink(missing_ok=True)

    def _place(self, found: _Restore) -> None:
        want = found.want
        session_dir = self.workspaces.session_dir(want.tenant, want.session)
        if want.kind == "snapshot":
            with image_lock(session_dir):
                os.replace(found.part, found.target)
                snap = Snapshot(id=str(want.snapshot), name=want.name,
                                created_at=want.created_at, bytes=want.bytes)
                _write_json(found.target.with_suffix(".json"), asdict(snap))
            return
        held = self.workspaces.offline(want.tenant, want.session, wait_s=OFFLINE_WAIT_S) \
            if found.target.is_file() else contextlib.nullcontext()
        with held, image_lock(session_dir):
            os.replace(found.part, found.target)
        _mkdir(session_dir, DIR_MODE)  # its mount point


def _sweep_parts(root: Path) -> None:
    """Part files of restores an earlier agent process staged and never finished."""
    for pattern in (f"*/*{PART}*", f"*/*.snapshots/*{PART}*"):
        for part in root.glob(pattern):
            with contextlib.suppress(OSError):
                part.unlink()


def _mkdir(path: Path, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
        os.chmod(path, mode)
