"""Proxying one ASGI request to a session's port over the relay: HTTP and WebSocket.

HTTP goes through an ``httpcore`` pool per session whose network backend opens relay
streams (``PortsHub.open``) instead of TCP connections, so keep-alive connections to the
program are reused and responses (SSE included) stream as they come. A WebSocket is spoken
again on the far side with ``websockets``' sans-I/O client over a relay stream, message by
message. Navi's credentials never go further: ``Authorization``, ``Cookie`` and the API-key
headers are dropped from every request, and every answer carries ``nosniff``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httpcore
from starlette.types import Receive, Scope, Send
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response as WsResponse
from websockets.protocol import State
from websockets.uri import parse_uri

from runtime.errors import PortUnreachable
from runtime.logging import get_logger
from runtime.ports.broker import Stream

log = get_logger(__name__)

Opener = Callable[[int], Awaitable[Stream]]

CREDENTIALS = frozenset({b"authorization", b"cookie", b"x-api-key", b"x-access-token",
                         b"e2b-traffic-access-token", b"proxy-authorization"})
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade", b"proxy-connection", b"host"})
NOSNIFF = (b"x-content-type-options", b"nosniff")


def forwarded_headers(headers: Iterable[tuple[bytes, bytes]], port: int
                      ) -> list[tuple[bytes, bytes]]:
    """The request's headers without credentials or hop-by-hop ones; Host is the port's."""
    kept = [(k.lower(), v) for k, v in headers
            if k.lower() not in CREDENTIALS and k.lower() not in HOP_BY_HOP]
    return [(b"host", b"127.0.0.1:%d" % port), *kept]


def answer_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    kept = [(k.lower(), v) for k, v in headers
            if k.lower() not in HOP_BY_HOP and k.lower() != NOSNIFF[0]]
    return [*kept, NOSNIFF]


class _RelayStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: Stream) -> None:
        self.reader, self.writer = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await asyncio.wait_for(self.reader.read(max_bytes), timeout)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self.writer.write(buffer)
            await asyncio.wait_for(self.writer.drain(), timeout)
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self.writer.close()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle kept-alive connection the program closed
            return self.reader.at_eof() or self.writer.is_closing()
        return None


class _RelayBackend(httpcore.AsyncNetworkBackend):
    """``connect_tcp(host, port)`` opens a relay stream to ``port`` of one session."""

    def __init__(self, opener: Opener) -> None:
        self.opener = opener

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> _RelayStream:
        return _RelayStream(await self.opener(port))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("not through the relay")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class PortProxy:
    """One pool per session (closed with it); ``http`` and ``websocket`` answer ASGI."""

    def __init__(self) -> None:
        self._pools: dict[str, httpcore.AsyncConnectionPool] = {}

    def _pool(self, session: str, opener: Opener) -> httpcore.AsyncConnectionPool:
        pool = self._pools.get(session)
        if pool is None:
            pool = httpcore.AsyncConnectionPool(
                network_backend=_RelayBackend(opener), max_connections=64,
                max_keepalive_connections=16, keepalive_expiry=5.0)
            self._pools[session] = pool
        return pool

    async def http(self, scope: Scope, receive: Receive, send: Send, *, session: str,
                   port: int, path: str, opener: Opener) -> None:
        headers = forwarded_headers(scope["headers"], port)
        sent_length = any(k == b"content-length" for k, _ in headers)
        chunked = any(k.lower() == b"transfer-encoding" for k, _ in scope["headers"])
        if chunked and not sent_length:
            headers.append((b"transfer-encoding", b"chunked"))
        query = scope.get("query_string") or b""
        target = path.encode("utf-8", "surrogateescape") + (b"?" + query if query else b"")
        url = httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=target)
        content = _body(receive) if sent_length or chunked else None
        pool = self._pool(session, opener)
        started = False
        try:
            async with pool.stream(scope["method"], url, headers=headers,
                                   content=content) as response:
                await send({"type": "http.response.start", "status": response.status,
                            "headers": answer_headers(response.headers)})
                started = True
                async for chunk in response.aiter_stream():
                    await send({"type": "http.response.body", "body": chunk,
                                "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise PortUnreachable(f"nothing answers on port {port}") from exc
        except PortUnreachable:
            raise
        except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.TimeoutException) as exc:
            if not started:
                raise PortUnreachable(f"port {port} broke off: {type(exc).__name__}") from exc
            log.info("port_stream_broken", port=port, error=type(exc).__name__)

    async def websocket(self, scope: Scope, receive: Receive, send: Send, *, port: int,
                        path: str, opener: Opener) -> None:
        """Accepts the client's WebSocket only once the program accepted ours."""
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            reader, writer = await opener(port)
        except PortUnreachable:
            await send({"type": "websocket.close", "code": 1011})
            return
        query = scope.get("query_string", b"").decode("latin-1")
        uri = parse_uri(f"ws://127.0.0.1:{port}{path}" + (f"?{query}" if query else ""))
        protocols = [p.strip() for p in scope.get("subprotocols", []) if p.strip()]
        ws = ClientProtocol(uri, subprotocols=protocols or None, max_size=16 * 1024 * 1024)
        ws.send_request(ws.connect())

        def flush() -> None:
            for data in ws.data_to_send():
                if data:
                    writer.write(data)

        try:
            flush()
            response = await _handshake(ws, reader)
            if ws.state is not State.OPEN or response is None:
                await send({"type": "websocket.close", "code": 1011})
                return
            await send({"type": "websocket.accept",
                        "subprotocol": response.headers.get("Sec-WebSocket-Protocol")})
            up = asyncio.ensure_future(_upstream(ws, reader, send, flush))
            down = asyncio.ensure_future(_downstream(ws, receive, flush))
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            for task in (up, down):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        finally:
            writer.close()

    async def release(self, session: str) -> None:
        pool = self._pools.pop(session, None)
        if pool is not None:
            await pool.aclose()

    async def close(self) -> None:
        for session in list(self._pools):
            await self.release(session)


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if body := message.get("body", b""):
            yield body
        if not message.get("more_body", False):
            return


async def _handshake(ws: ClientProtocol, reader: asyncio.StreamReader) -> WsResponse | None:
    while True:
        for event in ws.events_received():
            if isinstance(event, WsResponse):
                return event
        data = await asyncio.wait_for(reader.read(65536), 30)
        if not data:
            return None
        ws.receive_data(data)


async def _upstream(ws: ClientProtocol, reader: asyncio.StreamReader, send: Send,
                    flush: Callable[[], None]) -> None:
    """The program's frames to the client, messages reassembled."""
    parts: list[bytes] = []
    text = False
    while True:
        data = await reader.read(65536)
        if not data:
            ws.receive_eof()
        else:
            ws.receive_data(data)
        for event in ws.events_received():
            if not isinstance(event, Frame):
                continue
            if event.opcode is Opcode.CLOSE:
                flush()
                await send({"type": "websocket.close", "code": ws.close_code or 1000})
                return
            if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                parts, text = [bytes(event.data)], event.opcode is Opcode.TEXT
            elif event.opcode is Opcode.CONT:
                parts.append(bytes(event.data))
            else:
                continue  # ping/pong: the protocol answers pings itself
            if event.fin:
                body = b"".join(parts)
                parts = []
                await send({"type": "websocket.send", **(
                    {"text": body.decode("utf-8", "replace")} if text else {"bytes": body})})
        flush()
        if not data:
            await send({"type": "websocket.close", "code": 1011})
            return


async def _downstream(ws: ClientProtocol, receive: Receive, flush: Callable[[], None]) -> None:
    """The client's messages to the program."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            with contextlib.suppress(Exception):
                ws.send_close(message.get("code", 1000) if message.get("code") != 1005 else None)
                flush()
            return
        if message.get("text") is not None:
            ws.send_text(message["text"].encode("utf-8"))
        elif message.get("bytes") is not None:
            ws.send_binary(message["bytes"])
        flush()
