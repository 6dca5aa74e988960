"""A node agent's snapshots, forks and disk backups of its own sessions.

Why here: a session's image and its snapshots live on its node's disk; the control plane
keeps the audit record, the busy rule and the quota numbers
(`runtime.sessions.snapshots`) and asks for the work by ids
(`runtime.nodes.snapshot_wire`), the agent resolves them under its own data dir with the
same `SnapshotStore` a single server uses. `stream` sends a session's disk to `navi backup`
as bytes: each image is copied consistently into a scratch file on the node
(`runtime.workspace.image_copy.copy_image`: frozen if mounted, sparse), then only its data
ranges travel, so a 1 GiB image holding 1 MiB sends about 1 MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.backup_disks import data_ranges
from runtime.nodes.failures import packed
from runtime.nodes.snapshot_wire import DiskBackup, SnapshotOp
from runtime.nodes.wire import parsed
from runtime.workspace.image_copy import (
    copy_file_sparse,
    copy_image,
    image_lock,
    image_of,
    snapshots_dir,
)
from runtime.workspace.snapshot_store import SnapshotStore

if TYPE_CHECKING:
    from runtime.workspace.manager import Workspaces


STREAM_CHUNK = 1024 * 1024  # the most bytes a backup message carries


class NodeSnapshots:
    """Blocking: the agent calls these on a worker thread (`stream`: chunk by chunk)."""

    def __init__(self, workspaces: Workspaces, scratch: Path) -> None:
        self.workspaces = workspaces
        self.store = SnapshotStore(workspaces)
        self.scratch = scratch  # the node's own: backup copies before they are sent

    def handle(self, payload: object) -> Any:
        op = parsed(SnapshotOp, payload)
        t, s, store = op.tenant, op.session, self.store
        if op.op == "list":
            return store.list(t, s)
        if op.op == "busy":
            return store.busy(t, s)
        if op.op == "fork":
            assert op.target is not None  # checked by the model
            return store.copy_into(t, s, op.snapshot, op.target)
        assert op.snapshot is not None
        if op.op == "get":
            return store.get(t, s, op.snapshot)
        if op.op == "delete":
            return store.delete(t, s, op.snapshot)
        assert op.limit is not None
        if op.op == "create":
            return store.create(t, s, op.name, limit=op.limit, snapshot_id=op.snapshot)
        return store.restore(t, s, op.snapshot, limit=op.limit)

    def stream(self, payload: object) -> Generator[tuple[str, Any], None, None]:
        """("image", {name, kind, size, snapshot meta}) then ("data", (offset, bytes)) ...
        per image, the session's first; ("none", reason) when it has no image here."""
        want = parsed(DiskBackup, payload)
        session_dir = self.workspaces.session_dir(want.tenant, want.session)
        image = image_of(session_dir)
        if image.is_symlink() or not image.is_file():
            yield ("none", "no_image")
            return
        self.scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
        work = self.scratch / f"backup-{secrets.token_hex(6)}"
        os.mkdir(work, 0o700)
        try:
            try:
                stats = copy_image(session_dir, work / "session.img")
            except FileNotFoundError:
                yield ("none", "no_image")
                return
            copies = [("session", image.name, work / "session.img", stats.size, None)]
            if want.snapshots:
                copies += self._snapshots(want.tenant, want.session, session_dir, work)
            for kind, name, path, size, meta in copies:
                yield ("image", {"kind": kind, "name": name, "size": size, "meta": meta})
                yield from self._data(path)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _snapshots(self, tenant: str, session: str, session_dir: Path, work: Path
                   ) -> list[tuple[str, str, Path, int, Any]]:
        folder = snapshots_dir(session_dir)
        if folder.is_symlink() or not folder.is_dir():
            return []
        out: list[tuple[str, str, Path, int, Any]] = []
        with image_lock(session_dir):
            for snap in self.store.list(tenant, session):
                target = work / f"{snap.id}.img"
                stats = copy_file_sparse(folder / f"{snap.id}.img", target)
                out.append(("snapshot", f"{folder.name}/{snap.id}.img", target, stats.size,
                            asdict(snap)))
        return out

    @staticmethod
    def _data(path: Path) -> Iterator[tuple[str, Any]]:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            for start, end in data_ranges(fd, size):
                offset = start
                while offset < end:
                    chunk = os.pread(fd, min(STREAM_CHUNK, end - offset), offset)
                    if not chunk:
                        break
                    yield ("data", (offset, chunk))
                    offset += len(chunk)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)


async def streamed(items: Generator[Any, None, None]) -> AsyncIterator[Any]:
    """A blocking generator's items, each taken on a worker thread; an error as `Failed`
    (the last item); closed (its scratch copies removed) however the stream ends."""
    try:
        while (item := await asyncio.to_thread(next, items, None)) is not None:
            yield item
    except Exception as exc:
        yield packed(exc)
    finally:
        await asyncio.to_thread(items.close)
