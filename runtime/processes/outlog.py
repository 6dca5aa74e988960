"""A process's combined output as a log with byte offsets, on the data disk.

Offsets count every byte the process ever wrote (stdout and stderr in arrival order), so a
client can ask "from N on" and resume; the file keeps only the tail: once it holds
``2 * keep`` bytes, the last ``keep`` are copied into a fresh file and the offset of its
first byte (``first``) moves up. So at least the last ``keep`` bytes (1 MiB) are always
there and a log never takes more than ``2 * keep`` on disk. ``first`` lives in a small side
file beside the log, so a restarted supervisor reopens a log where it was.

Which stream wrote which bytes is kept too: a second side file (``.streams``) has a line
``offset stream`` wherever the stream changes (at most ``MAX_SWITCHES``, the oldest go
first; pruned with the rotation), so what is replayed from the log (``pieces``) keeps
stderr apart from stdout.

Written by one thread (the process's reader), read by any: a lock covers the rotation.
Blocking file I/O: call it off the event loop.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from pathlib import Path

KEEP = 1024 * 1024
MAX_SWITCHES = 16 * 1024
STREAM_NAMES = ("stdout", "stderr")


def tenant_log_bytes(root: Path, tenant_id: str) -> int:
    """Bytes of a tenant's process logs under ``root`` (counted in its disk quota)."""
    total = 0
    tenant_dir = root / tenant_id
    if not tenant_dir.is_dir() or tenant_dir.is_symlink():
        return 0
    for session in os.scandir(tenant_dir):
        if not session.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(session.path):
            with contextlib.suppress(OSError):
                total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def utf8_cut(data: bytes) -> int:
    """Where ``data`` ends on a character boundary: a UTF-8 sequence cut at its end is left
    for the next read (at most 3 bytes go back)."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): is its sequence complete?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else \
                3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return end if back >= need else end - back
    return end


class OutputLog:
    def __init__(self, path: Path, keep: int = KEEP) -> None:
        self.path = path
        self.keep = keep
        self._lock = threading.Lock()
        self._meta = path.with_suffix(".first")
        self._streams_path = path.with_suffix(".streams")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.first = int(self._meta.read_text()) if self._meta.exists() else 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        self._fd = fd
        self.end = self.first + os.fstat(fd).st_size
        self.switches = _read_switches(self._streams_path)  # (offset, stream) from there on

    def append(self, data: bytes, stream: str = "stdout") -> int:
        """Write ``data`` (from ``stream``); returns the offset of its first byte."""
        with self._lock:
            offset = self.end
            if data and stream != (self.switches[-1][1] if self.switches else "stdout"):
                self._switch(offset, stream)
            if self._fd >= 0:
                os.write(self._fd, data)
            self.end += len(data)
            if self.end - self.first >= 2 * self.keep:
                self._rotate()
            return offset

    def _rotate(self) -> None:
        start = self.end - self.keep
        with open(self.path, "rb") as reader:
            reader.seek(start - self.first)
            tail = reader.read()
        fresh = self.path.with_suffix(".new")
        with open(fresh, "wb") as writer:
            writer.write(tail)
        os.replace(fresh, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self.first = start
        meta = self._meta.with_suffix(".first.new")
        meta.write_text(str(start))
        os.replace(meta, self._meta)
        before = [s for s in self.switches if s[0] <= start]
        self.switches = ([(start, before[-1][1])] if before else []) + \
            [s for s in self.switches if s[0] > start]
        self._write_switches()

    def _switch(self, offset: int, stream: str) -> None:
        self.switches.append((offset, stream))
        if len(self.switches) > MAX_SWITCHES:  # the oldest go (replayed as stdout)
            del self.switches[:MAX_SWITCHES // 2]
            self._write_switches()
            return
        with contextlib.suppress(OSError), open(self._streams_path, "a") as side:
            side.write(f"{offset} {stream}\n")

    def _write_switches(self) -> None:
        fresh = self._streams_path.with_suffix(".streams.new")
        with contextlib.suppress(OSError):
            fresh.write_text("".join(f"{at} {s}\n" for at, s in self.switches))
            os.replace(fresh, self._streams_path)

    def read(self, since: int, max_bytes: int, *, complete: bool) -> tuple[bytes, int, int]:
        """(bytes from ``since``, the offset after them, ``first``). ``since`` before
        ``first`` reads from ``first``; past the end reads nothing. ``complete``: nothing
        more will be written, so a cut character at the very end is returned as it is."""
        with self._lock:
            first, end = self.first, self.end
            start = min(max(since, first), end)
            want = min(max_bytes, end - start)
            data = b""
            if want > 0:
                with open(self.path, "rb") as reader:
                    reader.seek(start - first)
                    data = reader.read(want)
        if not (complete and start + len(data) == end):
            data = data[:utf8_cut(data)]
        return data, start + len(data), first

    def pieces(self, since: int, max_bytes: int, *, complete: bool
               ) -> list[tuple[int, bytes, str]]:
        """``read``, cut where the stream changes: (offset, bytes, stream) in order."""
        data, after, _ = self.read(since, max_bytes, complete=complete)
        start = after - len(data)
        with self._lock:
            switches = list(self.switches)
        at = bisect.bisect_right(switches, start, key=lambda s: s[0])
        stream = switches[at - 1][1] if at else "stdout"
        found: list[tuple[int, bytes, str]] = []
        lo = start
        for cut, next_stream in switches[at:]:
            if cut >= after:
                break
            if cut > lo:
                found.append((lo, data[lo - start:cut - start], stream))
            lo, stream = cut, next_stream
        if after > lo:
            found.append((lo, data[lo - start:], stream))
        return found

    def size_on_disk(self) -> int:
        return self.end - self.first

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def remove(self) -> None:
        self.close()
        for path in (self.path, self._meta, self._streams_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _read_switches(path: Path) -> list[tuple[int, str]]:
    """The stream switches a side file holds (malformed lines are skipped)."""
    found: list[tuple[int, str]] = []
    with contextlib.suppress(OSError), open(path) as side:
        for line in side:
            at, _, stream = line.strip().partition(" ")
            if at.isdigit() and stream in STREAM_NAMES:
                found.append((int(at), stream))
    return found[-MAX_SWITCHES:]
