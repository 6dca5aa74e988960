"""Refuse new work while the data filesystem is full or read-only, before anything starts.

The data dir holds the audit log, the store and the session disks (sparse images). When the
operator's own processes fill that filesystem, or the kernel remounts it read-only after an
error, a call admitted anyway would fail half-way: an intent written but no outcome, a
container writing into a session image that cannot grow (EIO inside), an upload cut short.
So this ASGI middleware refuses a request that changes state (POST, PUT, PATCH) before any
route runs it, by what the filesystem said at most ``CHECK_INTERVAL_S`` ago, and answers

- 507 ``disk_full`` when less than ``floor_bytes`` are free (the margin the audit log, the
  store and a call's outcome need),
- 503 ``data_readonly`` when the filesystem is read-only (remounted so, or ext4's
  emergency read-only state after an error, which only a write shows: a probe file is
  made and removed) or gives I/O errors (DELETE too),

with ``Retry-After``. Reads (GET) and DELETEs on a full disk still pass: they free space or
change nothing. Nothing is recorded for a refused request (there is no room to record it);
the server takes calls again by itself once space returns.

The looks (``statvfs`` and the probe) run on a worker thread, never on the event loop: a
failing disk may take seconds to answer a file creation, and the loop serves every tenant.
While write requests come, the filesystem is looked at every ``REFRESH_S`` in the
background, so they pass without waiting; the first one after ``ACTIVE_S`` without any waits
for one look. The background stops looking at a read-only disk (the next write request
looks again) and at the server's shutdown.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MiB = 1024 * 1024
FLOOR_BYTES = 32 * MiB
CHECK_INTERVAL_S = 0.5  # the look a request is judged by is at most this old
REFRESH_S = 0.25  # while write requests come, the background looks this often
ACTIVE_S = 10.0  # ... until none came for this long
WRITES = frozenset({"POST", "PUT", "PATCH"})
Refusal = tuple[int, str, str]


class DataDiskGuard:
    def __init__(self, app: ASGIApp, data_dir: Path, floor_bytes: int = FLOOR_BYTES) -> None:
        self.app = app
        self.data_dir = data_dir
        self.floor_bytes = floor_bytes
        self._checked = float("-inf")  # monotonic time of the last look
        self._state: Refusal | None = None
        self._active_until = 0.0
        self._looking: asyncio.Future[None] | None = None
        self._keeper: asyncio.Future[None] | None = None
        self._closed = False

    async def state(self) -> Refusal | None:
        """(status, code, message) while the data disk refuses writes, else None."""
        now = time.monotonic()
        self._active_until = now + ACTIVE_S
        if self._keeper is None and not self._closed:
            self._keeper = asyncio.ensure_future(self._keep_fresh())
        if now - self._checked >= CHECK_INTERVAL_S:  # idle until now: one look first
            await asyncio.shield(self._look_once())
        return self._state

    async def _keep_fresh(self) -> None:
        try:
            while time.monotonic() < self._active_until:
                await asyncio.shield(self._look_once())
                if self._state is not None and self._state[1] == "data_readonly":
                    return  # no change to wait for: each write request looks (≤ 2/s)
                await asyncio.sleep(REFRESH_S)
        finally:
            self._keeper = None

    def close(self) -> None:
        """Stop looking in the background (the server shuts down)."""
        self._closed = True
        if self._keeper is not None:
            self._keeper.cancel()

    def _look_once(self) -> asyncio.Future[None]:
        """The look under way, or a new one (concurrent callers share it)."""
        if self._looking is None or self._looking.done():
            self._looking = asyncio.ensure_future(self._refresh())
        return self._looking

    async def _refresh(self) -> None:
        self._state = await asyncio.to_thread(self.look)
        self._checked = time.monotonic()

    def _closing_at_shutdown(self, receive: Receive) -> Receive:
        async def receive_and_watch() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                self.close()
            return message
        return receive_and_watch

    def look(self) -> Refusal | None:
        """What the filesystem says now (blocking: statvfs and a probe file)."""
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return None  # not created yet, or gone: the routes say what is wrong
        free = st.f_bavail * st.f_frsize
        if st.f_flag & os.ST_RDONLY or not self._writable():
            return (503, "data_readonly",
                    "the server's data disk is read-only; ask the operator")
        if free < self.floor_bytes:
            return (507, "disk_full",
                    f"the server's data disk is full ({free // MiB} MiB free, "
                    f"{self.floor_bytes // MiB} MiB needed); ask the operator to free space")
        return None

    def _writable(self) -> bool:
        """Create and remove a probe file: ext4's emergency read-only state after an error
        (`errors=remount-ro` on recent kernels) does not show in ``statvfs``."""
        probe = self.data_dir / ".navi-write-probe"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            return exc.errno not in (errno.EROFS, errno.EIO)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._closing_at_shutdown(receive), send)
            return
        method = scope.get("method", "")
        if scope["type"] != "http" or (method not in WRITES and method != "DELETE"):
            await self.app(scope, receive, send)
            return
        refused = await self.state()
        if refused is None or (method == "DELETE" and refused[0] == 507):
            await self.app(scope, receive, send)
            return
        status, code, message = refused
        body: dict[str, Any] = {"error": {"code": code, "message": message}}
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode()),
                                (b"retry-after", b"5")]})
        await send({"type": "http.response.body", "body": data})
