"""A sandbox's files for the SDK's `files.*`: the same safe layer and audit as `/v1` files.

Every operation opens the session's workspace or /tmp through its node (`OpenFiles`: fd
relative, no links followed, acting as the sandbox uid) and every change is recorded before
it is made (`file.write`, `file.delete`, `file.move`; a new directory is a `file.write` with
detail `mkdir`), as the key that created or connected the sandbox, in the sandbox's session.
Uploads stream to disk under the tenant's upload limit. A listing shows directories (empty
ones too) and regular files; links and special files are not shown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Literal

from runtime.e2b.auth import SandboxCaller
from runtime.e2b.paths import resolve, shown
from runtime.errors import Conflict, InvalidInput, NaviError, NotFound
from runtime.nodes import OpenFiles
from runtime.nodes.base import ReadStream
from runtime.workspace import disk_io
from runtime.workspace.tmpdir import Root
from runtime.workspace.tmpdir import shown as navi_shown

MAX_DEPTH = 32
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Entry:
    name: str
    kind: Literal["file", "dir"]
    path: str  # absolute, as the sandbox sees it
    size: int
    mtime: float


class SandboxFiles:
    def __init__(self, caller: SandboxCaller) -> None:
        self.caller = caller
        self.services = caller.services

    async def _open(self, root: Root) -> OpenFiles:
        node = self.services.nodes.for_session(self.caller.session)
        return await asyncio.to_thread(partial(node.open, self.caller.principal.tenant_id,
                                               self.caller.session.id, root=root))

    async def _record(self, action: Literal["file.write", "file.delete", "file.move"],
                      root: Root, rel: str, detail: str | None = None) -> None:
        """Audit the change before it is made (fail closed), like the `/v1` files routes."""
        subject = await self.caller.subject()
        await self.services.executor.record_action(
            subject, action, navi_shown(root, rel),
            rule=f"roles.{self.caller.principal.role}", detail=detail)

    async def stat(self, path: str) -> Entry:
        root, rel = resolve(path)
        files = await self._open(root)
        try:
            st = await asyncio.to_thread(files.stat, rel)
        finally:
            files.close()
        full = shown(root, st.path)
        return Entry(name=full.rsplit("/", 1)[-1], kind=st.kind, path=full, size=st.size,
                     mtime=st.mtime)

    async def list_dir(self, path: str, depth: int) -> list[Entry]:
        """Directories (empty ones too) and regular files below `path`, `depth` levels."""
        depth = min(max(depth, 1), MAX_DEPTH)
        root, rel = resolve(path)
        files = await self._open(root)
        try:
            return await asyncio.to_thread(self._listed, files, root, rel, path, depth)
        finally:
            files.close()

    @staticmethod
    def _listed(files: OpenFiles, root: Root, rel: str, path: str, depth: int) -> list[Entry]:
        st = files.stat(rel)
        if st.kind != "dir":
            raise InvalidInput(f"{path} is not a directory")
        tree = files.tree(rel, depth=depth, max_entries=MAX_ENTRIES)
        sizes = {f.path: f for f in files.list(rel)} if any(
            e.kind == "file" for e in tree.entries) else {}
        found: list[Entry] = []
        for item in tree.entries:
            size, mtime = item.size, 0.0
            if item.kind == "file" and item.path in sizes:
                size, mtime = sizes[item.path].size, sizes[item.path].mtime
            else:
                with contextlib.suppress(NaviError):  # gone meanwhile: still shown
                    found_st = files.stat(item.path)
                    size, mtime = found_st.size, found_st.mtime
            found.append(Entry(name=item.path.rsplit("/", 1)[-1], kind=item.kind,
                               path=shown(root, item.path),
                               size=size if item.kind == "file" else 0, mtime=mtime))
        return sorted(found, key=lambda e: e.path)

    async def make_dir(self, path: str) -> tuple[bool, Entry]:
        """(created, the directory); an existing directory is (False, it)."""
        root, rel = resolve(path)
        if not rel:
            return False, await self.stat(path)
        with contextlib.suppress(NotFound):
            existing = await self.stat(path)
            if existing.kind == "dir":
                return False, existing
            raise Conflict(f"{path} exists and is not a directory")
        await self._record("file.write", root, rel, detail="mkdir")
        files = await self._open(root)
        try:
            await asyncio.to_thread(files.mkdir, rel)
        finally:
            files.close()
        return True, await self.stat(path)

    async def move(self, source: str, destination: str) -> Entry:
        sroot, srel = resolve(source)
        droot, drel = resolve(destination)
        if sroot != droot:
            raise InvalidInput("moving between /home/user and /tmp is not supported: "
                               "copy the file instead")
        if not srel or not drel:
            raise InvalidInput("the workspace or /tmp itself cannot be moved")
        await self.stat(source)  # not found before anything is recorded
        await self._record("file.move", sroot, srel, detail=navi_shown(droot, drel))
        files = await self._open(sroot)
        try:
            await asyncio.to_thread(files.move, srel, drel)
        finally:
            files.close()
        return await self.stat(destination)

    async def remove(self, path: str) -> None:
        root, rel = resolve(path)
        if not rel:
            raise InvalidInput("the workspace or /tmp itself cannot be removed")
        await self.stat(path)
        await self._record("file.delete", root, rel)
        files = await self._open(root)
        try:
            await asyncio.to_thread(files.delete, rel)
        finally:
            files.close()

    async def open_read(self, path: str) -> tuple[OpenFiles, ReadStream]:
        """The open files and the reader: the caller holds both (the session's lease)
        until its response has ended (`runtime.api.held_response`)."""
        root, rel = resolve(path)
        files = await self._open(root)
        try:
            return files, await asyncio.to_thread(files.open_read, rel)
        except BaseException:
            files.close()
            raise

    async def write(self, path: str, chunks: AsyncIterator[bytes],
                    expected_size: int | None = None) -> Entry:
        """Stream `chunks` into `path` (parents made), under the tenant's upload limit."""
        root, rel = resolve(path)
        if not rel:
            raise InvalidInput(f"{path} is a directory")
        quotas = self.services.policy.quotas(
            await self.services.tenants.name(self.caller.principal.tenant_id))
        files = await self._open(root)
        try:
            writer = await asyncio.to_thread(partial(
                files.writer, rel, expected_size=expected_size,
                max_bytes=quotas.upload_mb * 1024 * 1024))
            entry = await disk_io.fill(writer, chunks, first=lambda: self._record(
                "file.write", root, writer.shown))
        finally:
            files.close()
        full = shown(root, entry.path)
        return Entry(name=full.rsplit("/", 1)[-1], kind="file", path=full, size=entry.size,
                     mtime=entry.mtime)
