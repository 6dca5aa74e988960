"""The hijacked attach socket of one container: stdin in, demultiplexed stdout/stderr out.

We attach *before* starting the container, so no output can be missed, and talk raw frames:
Docker multiplexes a non-TTY container's output as ``[type, 0, 0, 0, size (4 bytes BE)]``
followed by ``size`` bytes, with type 1 = stdout, 2 = stderr. Stdin is written and then
half-closed (``shutdown(SHUT_WR)``); with ``StdinOnce`` the engine then closes the program's
stdin, so it sees EOF. The stream ends (EOF) when the container exits or is killed.

Reading and writing block, so each runs in a thread of its own (never queued behind other
work: a long call must never starve the threads that would kill it). ``in_thread`` bridges
it back to the event loop as a future; finished threads wait a while for the next job, so
a call does not pay for starting two threads.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from runtime.logging import get_logger
from runtime.sandbox.docker.capture import StreamCapture, StreamName

log = get_logger(__name__)

T = TypeVar("T")
STDOUT, STDERR = 1, 2
READ_SIZE = 1 << 16


def raw_socket(attached: Any) -> socket.socket:
    """The real socket under what ``APIClient.attach_socket`` returns (a SocketIO on unix)."""
    sock = getattr(attached, "_sock", attached)
    if not isinstance(sock, socket.socket):
        raise TypeError(f"unexpected attach socket type {type(sock).__name__}")
    sock.settimeout(None)  # a call may be silent for its whole timeout
    return sock


class DaemonThreads:
    """Daemon threads reused for blocking jobs: a job starts at once on an idle thread or a
    new one (never queued behind another job); idle threads exit after ``idle_s``. Daemon, so
    a socket left blocking can never hold up the interpreter's exit."""

    def __init__(self, idle_s: float = 30.0) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._idle = 0
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], str]] = queue.SimpleQueue()

    def submit(self, job: Callable[[], None], name: str) -> None:
        with self._lock:
            if self._idle:  # that thread is promised this job
                self._idle -= 1
                self._jobs.put((job, name))
                return
        threading.Thread(target=self._work, args=(job, name), name=name, daemon=True).start()

    def _work(self, job: Callable[[], None], name: str) -> None:
        while True:
            threading.current_thread().name = name
            job()
            with self._lock:
                self._idle += 1
            try:
                job, name = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:  # a job handed over just as we timed out is still ours
                    try:
                        job, name = self._jobs.get_nowait()
                    except queue.Empty:
                        self._idle -= 1
                        return


_threads = DaemonThreads()


def in_thread(fn: Callable[..., T], *args: Any, name: str) -> asyncio.Future[T]:
    """Run ``fn(*args)`` on a daemon thread of its own; the future resolves on the loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, fn(*args))
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # loop already closed: nobody is waiting any more
            pass

    _threads.submit(target, name)
    return future


def send_nowait(sock: socket.socket, data: bytes) -> tuple[int, bool]:
    """Send what of ``data`` the socket takes now, never blocking, and half-close once all of
    it went: (bytes sent, half-closed). What is left (or failed) is ``feed_stdin``'s."""
    sent = 0
    try:
        if data:
            sent = sock.send(data, socket.MSG_DONTWAIT)
        if sent == len(data):
            sock.shutdown(socket.SHUT_WR)
            return sent, True
    except OSError:
        pass
    return sent, False


def feed_stdin(sock: socket.socket, data: bytes) -> None:
    """Write all of ``data`` then half-close; a program that exits early is not an error."""
    try:
        if data:
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def frames(sock: socket.socket) -> Iterator[tuple[int, bytes]]:
    """Docker's multiplexed stream until EOF: (the stream's kind, a piece of its payload)."""
    with sock.makefile("rb", buffering=READ_SIZE) as reader:
        while True:
            header = reader.read(8)
            if len(header) < 8:
                return
            kind, size = header[0], int.from_bytes(header[4:8], "big")
            while size:
                piece = reader.read(min(size, READ_SIZE))
                if not piece:
                    return
                size -= len(piece)
                yield kind, piece


def pump_output(
    sock: socket.socket,
    captures: dict[int, StreamCapture],
    emit: Callable[[StreamName, bytes], None] | None,
) -> None:
    """Read frames until EOF, feeding each stream's capture and emitting the live part."""
    try:
        for kind, piece in frames(sock):
            capture = captures.get(kind)
            if capture is None:
                continue
            live = capture.feed(piece)
            if live and emit is not None:
                emit(capture.name, live)
    except OSError as exc:  # we shut the socket down (kill, cancellation)
        log.debug("attach_stream_closed", error=str(exc))


def shutdown(attached: Any) -> None:
    """Wake any thread blocked on the attach socket and release it."""
    sock = getattr(attached, "_sock", attached)
    if sock is None:  # released already
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    for closable in (attached, sock):
        try:
            closable.close()
        except OSError:
            pass
