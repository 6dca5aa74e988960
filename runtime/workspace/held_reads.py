"""Files being sent to clients: held until their responses end, cut when their session goes.

Why: a download streams a file from an fd on the session's disk, and while any fd is open
there the disk cannot go away (a lazily detached mount keeps its loop device, a deleted
image its blocks, counted in nobody's quota). A client that stops reading would keep them
for as long as it liked. So a read that outlives its request handler is registered here
under its session and keeps the session's lease (no idle release, no restore under it)
until its response ends; deleting or restoring the session ``cut``s it: its file and its
lease are closed at once, whatever the client does, and its response is told to end.

Thread-safe: chunks are read in worker threads, a cut comes from another request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from runtime.errors import QuotaExceeded

Key = tuple[str, str]  # (tenant id, session id)


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    lock, done = threading.Lock(), [False]

    def call() -> None:
        with lock:
            if done[0]:
                return
            done[0] = True
        fn()
    return call


class Readable(Protocol):
    """What a held read needs of a file being read (a workspace's or a node's reader)."""

    @property
    def size(self) -> int: ...

    def read(self, n: int = -1) -> bytes: ...

    def close(self) -> None: ...


class HeldRead:
    """One file being sent: its reader and the release of its session's lease."""

    def __init__(self, key: Key, reader: Readable, release: Callable[[], None],
                 forget: Callable[[HeldRead], None]) -> None:
        self.key = key
        self.size = reader.size
        self._reader = reader
        self._release = release
        self._forget = forget
        self._lock = threading.Lock()  # a chunk being read, or the close
        self._closed = False
        self.was_cut = False
        self._on_cut: list[Callable[[], None]] = []

    def chunk(self, n: int) -> bytes:
        """Up to ``n`` more bytes; ``b""`` at the end or once closed (blocking)."""
        with self._lock:
            if self._closed:
                return b""
            return self._reader.read(n)

    def on_cut(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the cutting thread) when the read is cut."""
        with self._lock:
            self._on_cut.append(callback)
            cut = self.was_cut
        if cut:
            callback()

    def close(self) -> None:
        """Close the file and give the lease back (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._reader.close()
        finally:
            try:
                self._release()
            finally:
                self._forget(self)

    def cut(self) -> None:
        """Close now and tell the response to end (its client gets a short body)."""
        with self._lock:
            self.was_cut = True
            callbacks = list(self._on_cut)
        self.close()
        for callback in callbacks:
            callback()


class HeldReads:
    """The held reads of every session (one per app), and the caps on anonymous link reads:
    at most ``anonymous`` in flight on the server, ``per_link`` of any one link."""

    def __init__(self, *, anonymous: int = 32, per_link: int = 4) -> None:
        self._lock = threading.Lock()
        self._reads: dict[Key, set[HeldRead]] = {}
        self.anonymous = anonymous
        self.per_link = per_link
        self._anonymous = 0
        self._links: dict[str, int] = {}

    def enter_anonymous(self) -> Callable[[], None]:
        """A slot for one anonymous link request (its lookup, its read, its whole response);
        ``QuotaExceeded`` (429) when the server has ``anonymous`` in flight. Returns the
        slot's release (idempotent)."""
        with self._lock:
            if self._anonymous >= self.anonymous:
                raise QuotaExceeded("too many link requests in flight on this server; "
                                    "try again shortly", retry_after=1, quota="link_reads")
            self._anonymous += 1

        def leave() -> None:
            with self._lock:
                self._anonymous -= 1
        return _once(leave)

    def enter_link(self, link_id: str) -> Callable[[], None]:
        """A reader's slot on one link: ``QuotaExceeded`` (429) past ``per_link`` at once."""
        with self._lock:
            if self._links.get(link_id, 0) >= self.per_link:
                raise QuotaExceeded(f"this link has {self.per_link} readers already; try "
                                    "again when one is done", retry_after=5,
                                    quota="link_readers")
            self._links[link_id] = self._links.get(link_id, 0) + 1

        def leave() -> None:
            with self._lock:
                left = self._links.get(link_id, 0) - 1
                if left > 0:
                    self._links[link_id] = left
                else:
                    self._links.pop(link_id, None)
        return _once(leave)

    def hold(self, key: Key, reader: Readable, release: Callable[[], None]) -> HeldRead:
        """Register ``reader`` of the session ``key``; ``release`` gives its lease back."""
        held = HeldRead(key, reader, release, self._forget)
        with self._lock:
            self._reads.setdefault(key, set()).add(held)
        return held

    def _forget(self, held: HeldRead) -> None:
        with self._lock:
            found = self._reads.get(held.key)
            if found is not None:
                found.discard(held)
                if not found:
                    del self._reads[held.key]

    def cut(self, tenant_id: str, session_id: str) -> int:
        """End every read of the session in flight (it is being deleted or restored);
        how many there were."""
        with self._lock:
            found = list(self._reads.get((tenant_id, session_id), ()))
        for held in found:
            held.cut()
        return len(found)

    def count(self, tenant_id: str | None = None, session_id: str | None = None) -> int:
        with self._lock:
            return sum(len(v) for k, v in self._reads.items()
                       if tenant_id in (None, k[0]) and session_id in (None, k[1]))
