"""A streamed file response that holds its session until it has ended, and no longer.

Why not Starlette's ``StreamingResponse``: the file (and with it the session's disk) must
stay leased for as long as bytes are being sent, not only while the handler runs, and must
be let go of promptly whatever the client does. So this response:

- reads its chunks in worker threads from a ``HeldRead`` (``runtime.workspace.held_reads``),
  closed (file and lease) in its ``finally``, however the response ends;
- gives each chunk ``send_timeout_s`` to be taken by the client (``NAVI_SEND_TIMEOUT_S``): a
  client that stops reading is cut, the server closes its connection;
- ends as soon as the client disconnects, or the session is deleted or restored (a cut).

A response cut short leaves the connection closed with fewer bytes than its
``Content-Length``: the client sees a truncated body, never a wrong one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from runtime.errors import SessionBusy
from runtime.logging import get_logger
from runtime.nodes import OpenFiles
from runtime.workspace.held_reads import HeldRead, HeldReads, Readable

if TYPE_CHECKING:
    from runtime.api.services import Services

log = get_logger(__name__)

CHUNK = 64 * 1024


def hold(reads: HeldReads, tenant_id: str, session_id: str,
         files: OpenFiles | Callable[[], None], reader: Readable) -> HeldRead:
    """Register ``reader`` of the session's open ``files`` (or a release that closes them):
    both stay open (the session's lease with them) until the response ends or the session
    is deleted or restored."""
    release = files if callable(files) else files.close
    return reads.hold((tenant_id, session_id), reader, release)


async def wait_unheld(services: Services, tenant_id: str, session_id: str, *,
                      wait_s: float = 30.0) -> None:
    """Wait, on the loop and not in a worker thread, while the session is held exclusively
    (a restore's copy): a thread waiting there is one the whole server's pool lacks.
    ``SessionBusy`` (409) after ``wait_s``."""
    activity = services.workspaces.activity
    deadline = time.monotonic() + wait_s
    while activity.held((tenant_id, session_id)):
        if time.monotonic() > deadline:
            raise SessionBusy("the session is busy (a snapshot restore); try again")
        await asyncio.sleep(0.05)


class HeldFileResponse(StreamingResponse):
    """Streams ``held`` (its ``size`` bytes, as ``Content-Length``) and closes it."""

    def __init__(self, held: HeldRead, *, send_timeout_s: float, media_type: str,
                 headers: dict[str, str], prefix: bytes = b"") -> None:
        super().__init__(iter(()), media_type=media_type,
                         headers={**headers, "Content-Length": str(held.size)})
        self.held = held
        self.send_timeout_s = send_timeout_s
        self.prefix = prefix  # bytes already read from ``held`` (to tell its type)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()  # cut, or the client went away

        def on_cut() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(ended.set)

        self.held.on_cut(on_cut)
        watcher = asyncio.create_task(_until_disconnect(receive, ended))
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            prefix, self.prefix = self.prefix, b""
            while not ended.is_set():
                chunk = prefix or await asyncio.to_thread(self.held.chunk, CHUNK)
                prefix = b""
                if not chunk:
                    break
                if not await self._send(send, {"type": "http.response.body", "body": chunk,
                                               "more_body": True}, ended):
                    return
            if not ended.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()
            self.held.close()

    async def _send(self, send: Send, message: Message, ended: asyncio.Event) -> bool:
        """Send one chunk unless the client does not take it in time or the read ends
        meanwhile; whether it was sent."""
        sending = asyncio.ensure_future(send(message))
        waiting = asyncio.ensure_future(ended.wait())
        try:
            done, _ = await asyncio.wait({sending, waiting}, timeout=self.send_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            sending.cancel()
            raise
        finally:
            waiting.cancel()
        if sending in done:
            sending.result()
            return True
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sending
        if not ended.is_set():
            log.info("download_cut", reason="send_timeout", timeout_s=self.send_timeout_s,
                     tenant=self.held.key[0], session=self.held.key[1])
        return False


async def _until_disconnect(receive: Receive, ended: asyncio.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            ended.set()
            return
