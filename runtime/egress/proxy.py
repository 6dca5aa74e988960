"""The egress proxy of one execution: an asyncio HTTP proxy on a unix socket of its own.

Egress (docs/sandbox.md), when a policy allows it, goes only through an allowlisting
proxy reached over a unix socket mounted into the container; there is never a route to the
host or the LAN. The container itself keeps ``--network none``; the backend creates this
proxy before the container and closes it when the call ends::

    async with egress_proxy(["pypi.org"], EgressConfig(), data_dir / "egress",
                            exec_id="ex_1") as proxy:
        proxy.socket_path      # bind-mount this read-only into the container
    proxy.report()             # EgressReport: what was allowed and refused

Per connection (each decision logged and counted; see ``rules.py`` for the checks)::

    read the head (<= max_header_bytes, within idle_s)          431 / 408 / 400
    check_name(host, port)  -- before any DNS lookup            403
    resolve (the proxy's own resolver; IP literals are not)     502 when it does not resolve
    check_address on every address; connect to a passing one   403 when none passes, 502
      (``denied``: the cluster's own machines, refused here too)
    CONNECT: "200 Connection established", then bytes both ways
    http://: the request forwarded in origin-form (Connection: close), then bytes both ways

Bounded: at most ``max_connections`` at once (503 beyond), ``idle_s`` without a byte in
either direction closes a tunnel, ``connect_timeout_s``/``resolve_timeout_s`` per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.egress.report import EgressLedger, EgressReport
from runtime.egress.request import BadRequest, ProxyRequest, parse_head
from runtime.egress.rules import DeniedAddresses, EgressRules, IPAddress, parse_ip
from runtime.logging import get_logger

log = get_logger(__name__)
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
CHUNK = 64 * 1024
_PHRASES = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 502: "Bad Gateway",
            503: "Service Unavailable"}


class EgressConfig(BaseModel):
    """Proxy-wide settings (the allowlist is per execution, from the policy decision)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ports: tuple[int, ...] = Field((80, 443), description="destination ports allowed")
    allow_loopback: bool = Field(False, description="tests only: 127.0.0.0/8 and ::1 pass")
    private_hosts: tuple[str, ...] = Field(
        (), description="names that may resolve to private (RFC 1918 / ULA) addresses")
    max_connections: int = Field(32, ge=1, le=4096, description="open at once, per execution")
    idle_s: float = Field(60.0, gt=0, description="no byte either way for this long: closed")
    connect_timeout_s: float = Field(10.0, gt=0)
    resolve_timeout_s: float = Field(5.0, gt=0)
    max_header_bytes: int = Field(16 * 1024, ge=1024, le=1024 * 1024)

    @classmethod
    def from_settings(cls, settings: Any) -> EgressConfig:
        return cls(ports=tuple(settings.egress_ports),
                   allow_loopback=settings.egress_allow_loopback,
                   private_hosts=tuple(settings.egress_private_hosts),
                   max_connections=settings.egress_max_connections,
                   idle_s=settings.egress_idle_s)


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (the host's resolver), in the resolver's order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in found:
            found.append(ip)
    return found


class Refused(Exception):
    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


class EgressProxy:
    """One execution's proxy; ``start(directory)`` binds its socket, ``close()`` ends it."""

    def __init__(
        self, allowlist: Iterable[str], config: EgressConfig | None = None, *,
        exec_id: str = "", resolver: Resolver | None = None,
        denied: DeniedAddresses | None = None,
    ) -> None:
        self.config = config or EgressConfig()
        allow = list(allowlist)
        self.rules = EgressRules(allow, ports=self.config.ports,
                                 allow_loopback=self.config.allow_loopback,
                                 private_hosts=self.config.private_hosts, denied=denied)
        self.ledger = EgressLedger(allow)
        self.resolver = resolver or system_resolver
        self.socket_path: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._log = log.bind(exec_id=exec_id) if exec_id else log

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, directory: Path) -> Path:
        """Create ``directory`` (0700) and listen on a fresh socket in it (0666, so the
        sandbox uid can connect through the bind mount; the host path stays private)."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        name = f"{secrets.token_hex(8)}.sock"
        path = directory / name
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if len(os.fsencode(path)) < 100:
                sock.bind(str(path))
            else:  # sun_path holds ~107 bytes: bind through the directory's fd instead
                dirfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    sock.bind(f"/proc/self/fd/{dirfd}/{name}")
                finally:
                    os.close(dirfd)
            os.chmod(path, 0o666)
            self._server = await asyncio.start_unix_server(
                self._handle, sock=sock, limit=self.config.max_header_bytes
            )
        except BaseException:
            sock.close()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            raise
        self.socket_path = path
        return path

    async def close(self) -> None:
        """Stop listening, cut every open connection, remove the socket file."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        report = self.ledger
        self._log.info("egress_closed", connections=report.connections, allowed=report.allowed,
                       refused=report.refused, bytes_out=report.bytes_out,
                       bytes_in=report.bytes_in)

    def report(self) -> EgressReport:
        return self.ledger.report()

    # -- one connection ------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.ledger.connections += 1
        upstream: asyncio.StreamWriter | None = None
        try:
            if len(self._tasks) > self.config.max_connections:
                raise Refused(503, f"more than {self.config.max_connections} connections")
            request = await self._read_request(reader)
            up_reader, upstream = await self._open(request)
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.write(request.upstream_head())
            await self._relay(reader, writer, up_reader, upstream)
        except Refused as exc:
            await self._answer(writer, exc.status, exc.message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # close() cut us: end as a finished task (streams log cancelled handlers)
        finally:
            for w in (upstream, writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _read_request(self, reader: asyncio.StreamReader) -> ProxyRequest:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.config.idle_s)
        except asyncio.LimitOverrunError as exc:
            raise Refused(431, "request head too large") from exc
        except TimeoutError as exc:
            raise Refused(408, "no request in time") from exc
        try:
            return parse_head(head)
        except BadRequest as exc:
            raise Refused(400, str(exc)) from exc

    def _refuse(self, request: ProxyRequest, status: int, reason: str) -> Refused:
        self.ledger.record(request.host, request.port, "refused", reason)
        self._log.warning("egress_refused", host=request.host[:255], port=request.port,
                          reason=reason)
        return Refused(status, f"{request.host[:255]}:{request.port} refused: {reason}", reason)

    async def _open(
        self, request: ProxyRequest
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Decide and connect, or raise ``Refused`` (recorded and logged)."""
        host, port = request.host, request.port
        why = self.rules.check_name(host, port)
        if why is not None:
            raise self._refuse(request, 403, why)
        literal = parse_ip(host)
        if literal is not None:
            candidates = [literal]
        else:
            self.ledger.lookups += 1
            try:
                candidates = await asyncio.wait_for(
                    self.resolver(host.lower().removesuffix("."), port),
                    self.config.resolve_timeout_s)
            except (OSError, TimeoutError, UnicodeError):
                candidates = []
            if not candidates:
                raise self._refuse(request, 502, "name does not resolve")
        problems = {ip: self.rules.check_address(ip, host) for ip in candidates}
        good = [ip for ip, problem in problems.items() if problem is None]
        if not good:
            first = next(iter(problems.values()))
            raise self._refuse(request, 403, f"resolves to a {first}")
        self.ledger.record(host, port, "allowed")
        error: Exception | None = None
        for ip in good[:4]:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(str(ip), port, limit=CHUNK),
                    self.config.connect_timeout_s)
            except (OSError, TimeoutError) as exc:
                error = exc
                continue
            self._log.info("egress_allowed", host=host[:255], port=port, address=str(ip))
            return reader, writer
        self._log.warning("egress_connect_failed", host=host[:255], port=port, error=str(error))
        raise Refused(502, f"{host[:255]}:{port} allowed, but the connection failed")

    async def _relay(
        self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter,
        u_reader: asyncio.StreamReader, u_writer: asyncio.StreamWriter,
    ) -> None:
        """Bytes both ways until both sides are done or nothing moved for ``idle_s``."""
        last = [time.monotonic()]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, out: bool) -> None:
            try:
                while data := await src.read(CHUNK):
                    dst.write(data)
                    await dst.drain()
                    last[0] = time.monotonic()
                    if out:
                        self.ledger.bytes_out += len(data)
                    else:
                        self.ledger.bytes_in += len(data)
                if dst.can_write_eof():
                    dst.write_eof()
            except (ConnectionError, OSError):
                dst.close()

        pending = {asyncio.ensure_future(pump(c_reader, u_writer, True)),
                   asyncio.ensure_future(pump(u_reader, c_writer, False))}
        try:
            while pending:
                left = self.config.idle_s - (time.monotonic() - last[0])
                if left <= 0:
                    break
                _, pending = await asyncio.wait(pending, timeout=left)
        finally:
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending)

    async def _answer(self, writer: asyncio.StreamWriter, status: int, message: str) -> None:
        body = f"navi egress proxy: {message}\n".encode("ascii", "replace")
        head = (f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')}\r\n"
                "Content-Type: text/plain; charset=utf-8\r\nX-Navi-Egress: refused\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            writer.write(head.encode("ascii") + body)
            await asyncio.wait_for(writer.drain(), 5)


@contextlib.asynccontextmanager
async def egress_proxy(
    allowlist: Iterable[str], config: EgressConfig, directory: Path, *, exec_id: str = "",
    resolver: Resolver | None = None, denied: DeniedAddresses | None = None,
) -> AsyncIterator[EgressProxy]:
    """A started proxy for one execution, closed (socket removed) when the block ends.
    ``denied``: addresses refused whatever the policy says (a cluster's own machines)."""
    proxy = EgressProxy(allowlist, config, exec_id=exec_id, resolver=resolver, denied=denied)
    await proxy.start(directory)
    try:
        yield proxy
    finally:
        await asyncio.shield(proxy.close())
