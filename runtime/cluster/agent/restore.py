"""`navi restore` on a node: a backup's images put back on the node that holds the session.

The control plane names the session and the image (`runtime.nodes.snapshot_wire.RestoreImage`:
its disk, or a snapshot by id) and sends the bytes of its data ranges by handle; the agent
writes them into a part file beside the target in its own data dir and, on commit, renames
it into place: a session disk with the session held offline (its warm containers gone, its
disk unmounted; the next use mounts the restored image), as a snapshot restore does; a
snapshot's image with its description. Nothing in a request is a path. Blocking methods:
the agent calls them on a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import InvalidInput, NotFound
from runtime.nodes.snapshot_wire import RestoreImage
from runtime.nodes.wire import parsed
from runtime.workspace.image_copy import image_lock, image_of, snapshots_dir
from runtime.workspace.snapshots import Snapshot, _write_json

if TYPE_CHECKING:
    from runtime.workspace.manager import Workspaces

DIR_MODE = 0o711  # as the server makes a tenant's folder and a session's mount point


@dataclass
class _Restore:
    want: RestoreImage
    part: Path
    target: Path
    fd: int


class NodeRestores:
    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self._open: dict[str, _Restore] = {}

    def open(self, payload: object) -> str:
        want = parsed(RestoreImage, payload)
        session_dir = self.workspaces.session_dir(want.tenant, want.session)
        if want.kind == "session":
            target = image_of(session_dir)
            _mkdir(session_dir.parent, DIR_MODE)
        else:
            target = snapshots_dir(session_dir) / f"{want.snapshot}.img"
            _mkdir(session_dir.parent, DIR_MODE)
            _mkdir(target.parent, 0o700)
        part = target.with_name(f"{target.name}.restore-{secrets.token_hex(4)}")
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
        found = self._open.pop(handle, None) if isinstance(handle, str) else None
        if found is None:
            raise NotFound("no such restore")
        try:
            if commit is True:
                os.fsync(found.fd)
        finally:
            os.close(found.fd)
        if commit is not True:
            found.part.unlink(missing_ok=True)
            return
        try:
            self._place(found)
        finally:
            found.part.unlink(missing_ok=True)

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
        held = self.workspaces.offline(want.tenant, want.session) \
            if found.target.is_file() else contextlib.nullcontext()
        with held, image_lock(session_dir):
            os.replace(found.part, found.target)
        _mkdir(session_dir, DIR_MODE)  # its mount point


def _mkdir(path: Path, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
        os.chmod(path, mode)
