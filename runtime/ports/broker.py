"""The host side of one session's ports: unix sockets its containers connect out to.

A session's directory holds ``connect.sock`` (mounted, with the ``navi-ports`` relay, into
every container of the session that should reach its ports) and, per process that declared
ports, a directory of its own with ``serve.sock`` (mounted only into that process's
container). The relay in a process container keeps a control connection on its
``serve.sock``; to reach one of its ports the broker sends ``OPEN <id> <port>`` and the relay
answers with a new connection ``DATA <id> ok|refused`` carrying the bytes of a fresh TCP
connection to 127.0.0.1:<port> inside that container. ``connect.sock`` takes ``CONNECT
<port>`` from the session's other containers and bridges them the same way, and ``WATCH``
from a kernel's relay: ``PORTS <p>,<p>`` lines, now and whenever the running ports change.

Nothing here is reachable from another session: each session's sockets are in its own
directory, mounted only into its own containers; a process's serve socket only into its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import socket
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.errors import PortUnreachable
from runtime.logging import get_logger

log = get_logger(__name__)

RELAY_SOURCE = Path(__file__).with_name("navi_ports.py")
RELAY_NAME = "navi-ports"
CONNECT_SOCK = "connect.sock"
SERVE_SOCK = "serve.sock"
OPEN_TIMEOUT_S = 10.0
RELAY_WAIT_S = 3.0  # a process that just started: its relay has not connected yet
MAX_LINE = 128
MAX_CONNECTIONS = 512
"""Connections one session's sockets hold at once (the supervisor's file descriptors)."""
CLOSE_WAIT_S = 1.0  # for its connections to end when the broker closes
MAX_WATCHERS = 16  # kernels following the ports (a session runs a few at most)

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()


async def splice(a: Stream, b: Stream) -> None:
    """Copy bytes both ways until both directions ended, then close both."""
    try:
        await asyncio.gather(_pipe(a[0], b[1]), _pipe(b[0], a[1]))
    finally:
        a[1].close()
        b[1].close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _quiet(handler: Handler, conns: weakref.WeakSet[asyncio.StreamWriter] | None = None
           ) -> Handler:
    """A connection handler whose cancellation (server shutdown) ends it quietly: Python
    3.11's stream protocol logs a cancelled handler task as an error. ``conns`` keeps every
    accepted connection, to be cut when the broker closes."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if conns is not None:
            if len(conns) >= MAX_CONNECTIONS:  # sandbox code may open them without end
                writer.close()
                return
            conns.add(writer)
        try:
            await handler(reader, writer)
        except asyncio.CancelledError:
            writer.close()

    return run


async def bind_unix(path: Path, handler: Handler,
                    conns: weakref.WeakSet[asyncio.StreamWriter] | None = None
                    ) -> asyncio.AbstractServer:
    """Listen on ``path`` (0666: the sandbox uid connects through the read-only mount; the
    directories above stay private). Long paths bind through the directory's fd."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < 100:
            sock.bind(str(path))
        else:
            dirfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{dirfd}/{path.name}")
            finally:
                os.close(dirfd)
        os.chmod(path, 0o666)
        return await asyncio.start_unix_server(_quiet(handler, conns), sock=sock,
                                               limit=MAX_LINE * 4)
    except BaseException:
        sock.close()
        raise


@dataclass(eq=False)
class _Served:
    """One process's serve socket, its relay's control connection and pending opens."""

    process_id: str
    ports: tuple[int, ...]
    directory: Path
    server: asyncio.AbstractServer | None = None
    control: asyncio.StreamWriter | None = None
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    pending: dict[str, asyncio.Future[Stream | None]] = field(default_factory=dict)


class SessionBroker:
    """One session's sockets; ``open(port)`` gives a byte stream to that port's process."""

    def __init__(self, session: str, directory: Path, serve_root: Path) -> None:
        self.session = session
        self.directory = directory
        self.serve_root = serve_root
        self._server: asyncio.AbstractServer | None = None
        self._served: dict[str, _Served] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: weakref.WeakSet[asyncio.StreamWriter] = weakref.WeakSet()
        self._watchers: set[asyncio.StreamWriter] = set()
        self._closing = False

    async def start(self) -> None:
        self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.serve_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        relay = self.directory / RELAY_NAME
        shutil.copyfile(RELAY_SOURCE, relay)
        os.chmod(relay, 0o644)
        self._server = await bind_unix(self.directory / CONNECT_SOCK, self._client, self._conns)

    def ports(self) -> dict[int, str]:
        return {port: s.process_id for s in self._served.values() for port in s.ports}

    def serve_dir(self, process_id: str) -> Path:
        return self.serve_root / process_id

    async def add_process(self, process_id: str, ports: tuple[int, ...]) -> Path:
        """Listen on the process's serve socket; returns its directory (to mount)."""
        await self.remove_process(process_id)  # its directory stays: a relay may have it
        directory = self.serve_dir(process_id)
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        served = _Served(process_id, ports, directory)
        served.server = await bind_unix(directory / SERVE_SOCK,
                                        lambda r, w: self._serve(served, r, w), self._conns)
        self._served[process_id] = served
        self._announce()
        return directory

    async def remove_process(self, process_id: str, *, forget: bool = False) -> None:
        """Stop serving the process's ports; ``forget``: its directory goes too (it ended)."""
        served = self._served.pop(process_id, None)
        if served is None:
            return
        self._announce()
        if served.server is not None:
            served.server.close()
        if served.control is not None:
            served.control.close()
        for future in served.pending.values():
            if not future.done():
                future.set_result(None)
        with contextlib.suppress(FileNotFoundError):
            (served.directory / SERVE_SOCK).unlink()
        if forget:
            with contextlib.suppress(OSError):
                shutil.rmtree(served.directory)

    async def open(self, port: int) -> Stream:
        """A fresh connection to 127.0.0.1:<port> in the process that declared it; raises
        ``PortUnreachable`` while nothing listens there (or its relay is not up)."""
        served = next((s for s in self._served.values() if port in s.ports), None)
        if served is None:
            raise PortUnreachable(f"no running process of this session declares port {port}")
        if served.control is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(served.connected.wait(), RELAY_WAIT_S)
        control = served.control
        if control is None or control.is_closing():
            raise PortUnreachable(f"port {port}: the process's relay is not connected")
        conn_id = str(next(self._ids))
        future: asyncio.Future[Stream | None] = asyncio.get_running_loop().create_future()
        served.pending[conn_id] = future
        try:
            control.write(b"OPEN %s %d\n" % (conn_id.encode(), port))
            await control.drain()
            stream = await asyncio.wait_for(future, OPEN_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise PortUnreachable(f"port {port} did not answer") from exc
        finally:
            served.pending.pop(conn_id, None)
        if stream is None:
            raise PortUnreachable(f"nothing listens on port {port} in the process")
        return stream

    async def _serve(self, served: _Served, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).split()
        except (OSError, ValueError):
            writer.close()
            return
        if line == [b"SERVE"]:
            if served.control is not None:
                served.control.close()
            served.control = writer
            served.connected.set()
            with contextlib.suppress(OSError, ValueError):
                while await reader.readline():  # nothing is expected: wait for the end
                    pass
            if served.control is writer:
                served.control = None
                served.connected.clear()
            writer.close()
            return
        if len(line) == 3 and line[0] == b"DATA":
            future = served.pending.get(line[1].decode("ascii", "replace"))
            if future is not None and not future.done() and line[2] == b"ok":
                future.set_result((reader, writer))
                return
            if future is not None and not future.done():
                future.set_result(None)
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A session container's connection to one of the session's ports."""
        if self._closing:  # accepted just before the broker closed: its task starts late
            writer.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            line = (await reader.readline()).split()
            if line == [b"WATCH"]:
                await self._watch(reader, writer)
                return
            if len(line) != 2 or line[0] != b"CONNECT" or not line[1].isdigit():
                writer.close()
                return
            try:
                upstream = await self.open(int(line[1]))
            except PortUnreachable:
                writer.write(b"refused\n")
                writer.close()
                return
            writer.write(b"ok\n")
            await splice((reader, writer), upstream)
        except (OSError, ValueError):
            writer.close()
        finally:
            if task is not None:
                self._tasks.discard(task)

    def _ports_line(self) -> bytes:
        return b"PORTS %s\n" % ",".join(map(str, sorted(self.ports()))).encode()

    def _announce(self) -> None:
        line = self._ports_line()
        for writer in list(self._watchers):
            if writer.is_closing():
                self._watchers.discard(writer)
            else:
                writer.write(line)

    async def _watch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A kernel's relay follows the running ports (nothing more is read from it)."""
        if len(self._watchers) >= MAX_WATCHERS:
            writer.close()
            return
        self._watchers.add(writer)
        try:
            writer.write(self._ports_line())
            while await reader.read(MAX_LINE):  # anything it says is ignored
                pass
        finally:
            self._watchers.discard(writer)
            writer.close()

    async def close(self, *, forget: bool = False) -> None:
        """Stop listening; ``forget``: remove the session's directories as well."""
        self._closing = True
        if self._server is not None:  # first: no connection is accepted while we close
            self._server.close()
            self._server = None
        for _ in range(2):  # handlers of connections accepted just now start (and stop)
            await asyncio.sleep(0)
        for process_id in list(self._served):
            await self.remove_process(process_id, forget=forget)
        tasks, writers = list(self._tasks), list(self._conns)
        for task in tasks:
            task.cancel()
        for writer in writers:
            writer.close()
        # ended before the broker is: a transport closed after its loop is gone leaks its fd
        waits = [*tasks, *(asyncio.ensure_future(w.wait_closed()) for w in writers)]
        if waits:
            _, late = await asyncio.wait(waits, timeout=CLOSE_WAIT_S)
            for waiting in late:
                waiting.cancel()
        await asyncio.sleep(0)  # transports closed by handlers that ended already finish now
        with contextlib.suppress(FileNotFoundError):
            (self.directory / CONNECT_SOCK).unlink()
        if forget:
            for directory in (self.directory, self.serve_root):
                with contextlib.suppress(OSError):
                    shutil.rmtree(directory)
