"""Bounded capture of one output stream: head + tail in memory, the full stream as an artifact.

Sandboxed code may print gigabytes; the supervisor keeps at most ``cap`` bytes per stream in
memory. Past the cap the result keeps the first and the last ``cap // 2`` bytes with a marker
between them, and the whole stream goes to ``<artifacts>/<session>/<exec_id>.<stream>``.

Artifacts live under the data dir, never in the session workspace: the sandbox controls the
workspace and could plant a symlink where the host is about to write. Files are created with
``O_EXCL | O_NOFOLLOW`` (mode 0600) all the same. An artifact stops growing at
``artifact_max`` bytes so a runaway program cannot fill the host's disk.

Runs in the reader thread (blocking file I/O is fine there), never on the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from runtime.logging import get_logger

log = get_logger(__name__)

StreamName = Literal["stdout", "stderr"]


class StreamCapture:
    """Feed it the bytes of one stream as they come; ``result()`` when the stream ended."""

    def __init__(
        self, *, name: StreamName, cap: int, artifact_path: Path, artifact_max: int
    ) -> None:
        self.name = name
        self.cap = cap
        self.half = cap // 2
        self.artifact_path = artifact_path
        self.artifact_max = artifact_max
        self.size = 0
        self._buf = bytearray()  # everything, until the cap is passed; then the head
        self._tail = bytearray()
        self._fd: int | None = None
        self._opened = False
        self._written = 0
        self.artifact_complete = True

    @property
    def truncated(self) -> bool:
        return self.size > self.cap

    def feed(self, data: bytes) -> bytes:
        """Take ``data``; return the part still below the cap (what may be streamed live)."""
        live = data[: max(0, self.cap - self.size)]
        self.size += len(data)
        if not self._opened and self.size <= self.cap:
            self._buf += data
            return live
        if not self._opened:
            self._opened = True
            self._open_artifact()
            self._buf += data
            self._write(bytes(self._buf))
            self._tail = self._buf[self.half :]
            del self._buf[self.half :]
        else:
            self._write(data)
            self._tail += data
        if len(self._tail) > self.half:
            del self._tail[: len(self._tail) - self.half]
        return live

    def result(self) -> bytes:
        """The stream, or head + marker + tail when it passed the cap."""
        if not self.truncated:
            return bytes(self._buf)
        omitted = self.size - len(self._buf) - len(self._tail)
        marker = (
            f"\n[navi: {omitted} bytes omitted; {self.size} bytes in total, "
            f"full {self.name} kept as an artifact]\n"
        ).encode()
        return bytes(self._buf) + marker + bytes(self._tail)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open_artifact(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.artifact_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._fd = os.open(self.artifact_path, flags, 0o600)
        except OSError as exc:
            log.error("artifact_open_failed", path=str(self.artifact_path), error=str(exc))
            self.artifact_complete = False

    @property
    def artifact(self) -> Path | None:
        """Where the full stream was saved, if it was."""
        return self.artifact_path if self._opened and self._written else None

    def _write(self, data: bytes) -> None:
        """Append to the artifact; a failing disk loses the artifact, never the call."""
        room = self.artifact_max - self._written
        if self._fd is None or room <= 0:
            return
        if len(data) > room:
            data = data[:room]
            self.artifact_complete = False
            log.warning("artifact_capped", path=str(self.artifact_path), max=self.artifact_max)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            log.error("artifact_write_failed", path=str(self.artifact_path), error=str(exc))
            self.artifact_complete = False
            self.close()
            return
        self._written += len(data)
