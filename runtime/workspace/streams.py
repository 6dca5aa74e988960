"""The two file handles a workspace hands out: a bounded reader and an atomic, capped writer.

``FileReader`` iterates over an already-opened, already-checked regular file and yields at most
the size it had when opened (so a ``Content-Length`` taken from ``size`` stays true even if the
sandbox appends meanwhile). ``AtomicWriter`` writes a temporary file next to the target
(``O_CREAT | O_EXCL | O_NOFOLLOW``), enforces a byte budget while data arrives, then fsyncs,
sets mode/owner and ``renameat``s it over the target: readers see the old or the new content,
never a torn file, and a failed or oversized upload leaves nothing behind.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from types import TracebackType

from runtime.errors import InvalidPath, PayloadTooLarge
from runtime.workspace.actas import acting_as, as_owner
from runtime.workspace.disk_io import later
from runtime.workspace.fs import Resolver, classify, raise_mapped
from runtime.workspace.models import FileEntry
from runtime.workspace.paths import RESERVED_PREFIX

CHUNK = 64 * 1024


class FileReader:
    """An open workspace file. Iterate for chunks (closes at the end), or ``read()``."""

    def __init__(self, fd: int, path: str, st: os.stat_result, chunk_size: int = CHUNK) -> None:
        self._fd = fd
        self.path = path
        self.size = st.st_size
        self.mtime = st.st_mtime
        self._chunk = chunk_size
        self._left = st.st_size

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left, up to ``size``, when ``n < 0``)."""
        want = self._left if n < 0 else min(n, self._left)
        parts: list[bytes] = []
        while want > 0 and self._fd >= 0:
            chunk = os.read(self._fd, min(want, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            want -= len(chunk)
            self._left -= len(chunk)
        return b"".join(parts)

    def __iter__(self) -> Iterator[bytes]:
        try:
            while True:
                chunk = self.read(self._chunk)
                if not chunk:
                    return
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def check_replaceable(resolver: Resolver, dir_fd: int, name: str, shown: str, *,
                      writable: bool = False) -> int:
    """Size of the regular file at ``name`` (0 if absent); refuse anything else there.
    ``writable``: also refuse (403) a file the caller could not open for writing (the
    sandbox's ``chmod -w`` binds the API too, though the replacement is a rename)."""
    try:
        st = resolver.lstat_child(dir_fd, name)
    except FileNotFoundError:
        return 0
    if classify(st, shown) == "dir":
        raise InvalidPath(f"invalid path: is a directory: {shown}")
    if writable:
        try:
            os.close(resolver.open_child(dir_fd, name, os.O_WRONLY | os.O_NONBLOCK))
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise_mapped(exc, shown)
    return st.st_size


class AtomicWriter:
    """Context manager: ``write()`` chunks; committed on a clean exit, discarded on an error.

    Takes ownership of ``dir_fd`` (the target's parent directory).
    """

    def __init__(
        self,
        resolver: Resolver,
        dir_fd: int,
        name: str,
        shown: str,
        *,
        budget: int,
        too_large: Callable[[], PayloadTooLarge],
        owner: tuple[int, int] | None,
        mode: int = 0o660,
        acting: tuple[int, int] | None = None,
    ) -> None:
        self._resolver = resolver
        self._dir_fd = dir_fd
        self._name = name
        self._shown = shown
        self._budget = budget
        self._too_large = too_large
        self._owner = owner
        self._mode = mode
        self.acting = acting  # the workspace's fsuid/fsgid: commit and abort run as it too
        self._tmp = RESERVED_PREFIX + secrets.token_hex(8)
        self.written = 0
        self.result: FileEntry | None = None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with acting_as(acting):
                self._fd = os.open(self._tmp, flags, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            os.close(dir_fd)
            self._dir_fd = -1
            raise_mapped(exc, shown)

    @property
    def shown(self) -> str:
        """The workspace-relative path being written (normalised)."""
        return self._shown

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._fd < 0:
            raise ValueError("writer is closed")
        view = memoryview(data).cast("B")
        if self.written + len(view) > self._budget:
            self.abort()
            raise self._too_large()
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
                self.written += n
        except OSError as exc:
            self.abort()
            raise_mapped(exc, self._shown)

    @as_owner
    def commit(self) -> FileEntry:
        """Make the file visible under its name; returns its entry (idempotent)."""
        if self.result is not None:
            return self.result
        if self._fd < 0:
            raise ValueError("writer is closed")
        try:
            os.fchmod(self._fd, self._mode)
            if self._owner is not None:
                os.fchown(self._fd, *self._owner)
            os.fsync(self._fd)
            st = os.fstat(self._fd)
            os.close(self._fd)
            self._fd = -1
            check_replaceable(self._resolver, self._dir_fd, self._name, self._shown)
            self._resolver.rename(self._dir_fd, self._tmp, self._dir_fd, self._name,
                                  replace=True)
            os.fsync(self._dir_fd)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise_mapped(exc, self._shown)
            raise
        self._close_dir()
        self.result = FileEntry(path=self._shown, size=st.st_size, mtime=st.st_mtime)
        return self.result

    @as_owner
    def abort(self) -> None:
        """Discard the temporary file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._dir_fd >= 0:
            try:
                os.unlink(self._tmp, dir_fd=self._dir_fd)
            except OSError:
                pass
            self._close_dir()

    def _close_dir(self) -> None:
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __del__(self) -> None:
        # never here: the finalizer may run on the event loop, and an unlink waits out a
        # frozen filesystem (a snapshot's copy)
        if getattr(self, "_dir_fd", -1) >= 0 or getattr(self, "_fd", -1) >= 0:
            later(self.abort)
