"""Uploads into a node's session files: a handle fed numbered chunks, committed or aborted.

The control plane sends a file in bounded chunks (`runtime.nodes.wire.CHUNK`) that may
arrive together; they are written in order. An upload its control plane forgot is aborted
after `IDLE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from runtime.nodes.failures import Failed, packed
from runtime.nodes.wire import WriteOpen, parsed
from runtime.workspace import AtomicWriter, Workspace, Workspaces

IDLE_S = 600.0


@dataclass
class _Upload:
    workspace: Workspace
    writer: AtomicWriter
    used: float
    next_seq: int = 0
    failed: Failed | None = None
    turn: asyncio.Condition = field(default_factory=asyncio.Condition)


class NodeUploads:
    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces
        self._uploads: dict[str, _Upload] = {}

    def open(self, payload: bytes) -> tuple[str, str]:
        """Blocking: an upload's handle and the path as shown."""
        op = parsed(WriteOpen, payload)
        ws = self.workspaces.open(op.tenant, op.session, root=op.root)
        try:
            writer = ws.writer(op.path, expected_size=op.expected_size, max_bytes=op.max_bytes)
        except BaseException:
            ws.close()
            raise
        handle = uuid.uuid4().hex
        self._uploads[handle] = _Upload(ws, writer, time.monotonic())
        return handle, writer.shown

    async def write(self, handle: str, seq: int, data: bytes) -> None | Failed:
        """Chunk number `seq` (they may arrive together: written in order)."""
        if not (isinstance(seq, int) and isinstance(data, bytes)):
            return Failed("InvalidInput", "an upload chunk is a number and bytes")
        upload = self._uploads.get(handle) if isinstance(handle, str) else None
        if upload is None:
            return Failed("NotFound", "no such upload (aborted, or idle too long)")
        async with upload.turn:
            await upload.turn.wait_for(lambda: upload.next_seq == seq)
            upload.used = time.monotonic()
            if upload.failed is None:
                try:  # on the loop: a <= 1 MiB write to the page cache costs less than a
                    upload.writer.write(data)  # thread hop
                except Exception as exc:
                    upload.failed = packed(exc)
            upload.next_seq += 1
            upload.turn.notify_all()
            return upload.failed

    def take(self, handle: str) -> _Upload | None:
        return self._uploads.pop(handle, None) if isinstance(handle, str) else None

    @staticmethod
    def end(upload: _Upload, commit: bool) -> Any:
        """Blocking: commit (the `FileEntry`) or abort; its workspace is closed."""
        try:
            if upload.failed is not None:
                upload.writer.abort()
                return upload.failed
            if commit:
                return upload.writer.commit()
            upload.writer.abort()
            return None
        finally:
            upload.workspace.close()

    def sweep(self) -> None:
        now = time.monotonic()
        for handle, upload in list(self._uploads.items()):
            if now - upload.used > IDLE_S:
                del self._uploads[handle]
                with contextlib.suppress(Exception):
                    upload.writer.abort()
                upload.workspace.close()
