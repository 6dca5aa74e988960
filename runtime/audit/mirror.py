"""The JSON-lines copy of the audit chain (`audit.jsonl`): one canonical record per line.

The SQLite table is authoritative; the mirror is a plain file an operator can ship, grep or
archive. Writers hold an exclusive ``flock`` on it for the whole append (database commit
included), so lines are in `seq` order even with several processes sharing a data dir. A
line torn by a crash is cut off, and lines the database has but the mirror lacks (a crash
between commit and mirror write, or a power loss before the mirror's lazy fsync) are
written back before the next record. Blocking calls: run them in a worker thread.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from runtime.logging import get_logger

log = get_logger(__name__)
_CHUNK = 65536


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Mirror:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._known: tuple[int, int | None] | None = None  # (size, last seq) as last seen

    def open(self) -> None:
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        if created:
            fsync_dir(self.path.parent)

    def close(self) -> None:
        self._known = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise OSError("audit mirror is not open")
        return self._fd

    def lock(self) -> int | None:
        """Take the writers' lock; cut a torn last line; return the last seq (0 = empty).

        None means the last complete line is not a record (the file was edited): the caller
        then appends without back-filling and `verify` reports the damage.
        """
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(self.fd).st_size
            if self._known is not None and self._known[0] == size:
                return self._known[1]  # nobody appended since our last look
            seq = self._last_seq()
            self._known = (os.fstat(self.fd).st_size, seq)
            return seq
        except BaseException:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            raise

    def unlock(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def write(self, lines: list[str], last_seq: int) -> None:
        """Append ``lines``, the last of which is record ``last_seq`` (not fsync'd: ``sync``)."""
        self._known = None
        data = "".join(line + "\n" for line in lines).encode("ascii")
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self._known = (os.fstat(self.fd).st_size, last_seq)

    def sync(self) -> None:
        os.fsync(self.fd)

    def _last_seq(self) -> int | None:
        size = os.fstat(self.fd).st_size
        if size == 0:
            return 0
        end = size
        tail = b""
        # find the last newline; anything after it is a torn write
        while True:
            start = max(0, end - _CHUNK)
            tail = os.pread(self.fd, end - start, start) + tail
            end = start
            cut = tail.rfind(b"\n")
            if cut != -1 or start == 0:
                break
        if cut == -1:
            complete_end = 0
        else:
            complete_end = size - len(tail) + cut + 1
        if complete_end < size:
            log.warning("audit_mirror_torn_line_cut", path=str(self.path),
                        bytes=size - complete_end)
            os.ftruncate(self.fd, complete_end)
            os.fsync(self.fd)
        if complete_end == 0:
            return 0
        # read the last complete line
        end = complete_end - 1
        line = b""
        while end > 0:
            start = max(0, end - _CHUNK)
            line = os.pread(self.fd, end - start, start) + line
            nl = line.rfind(b"\n")
            if nl != -1:
                line = line[nl + 1:]
                break
            end = start
        try:
            seq = json.loads(line)["seq"]
        except (ValueError, KeyError, TypeError):
            return None
        return seq if isinstance(seq, int) and seq >= 0 else None
