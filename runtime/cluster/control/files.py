"""A session's files on a node, seen from the control plane: `OpenFiles` over the hop.

Every operation is one actor call (the agent opens the workspace, does it, closes it), its
request the JSON of a `runtime.nodes.wire` model; reads stream in chunks of <= 1 MiB (a
streaming generator, at most READ_AHEAD chunks ahead), writes go in chunks of <= 1 MiB to an
upload handle (at most WRITE_AHEAD in flight, written in order there), then commit or
abort. (64 KiB chunks, which Ray passes inline, were no faster: each is a task on the node,
≈ 1 ms under load.) Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import ray

from runtime.cluster.control.hop import Hop, wire
from runtime.nodes.wire import CHUNK, FileOp, ReadOp, Where, WriteOpen
from runtime.workspace.models import FileEntry, FileStat
from runtime.workspace.search import GlobResult, GrepResult, SearchLimits, TreeResult
from runtime.workspace.tmpdir import Root

READ_AHEAD = 4  # chunks a read may run ahead of its reader (4 MiB)
WRITE_AHEAD = 4  # chunks an upload may have in flight (4 MiB)


class RemoteReader:
    """`ReadStream` over the agent's streaming `read`: size and mtime first, then chunks."""

    def __init__(self, hop: Hop, stream: Any) -> None:
        self._hop = hop
        self._stream = stream
        self._left = b""
        self._done = False
        self.size, self.mtime = hop.get(next(stream))  # raises the agent's error, if any

    def _next(self) -> bytes:
        if self._done:
            return b""
        try:
            ref = next(self._stream)
        except StopIteration:
            self._done = True
            return b""
        chunk: bytes = self._hop.get(ref)
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        try:
            if self._left:
                yield self._left
                self._left = b""
            while chunk := self._next():
                yield chunk
        finally:
            self.close()

    def read(self, n: int = -1) -> bytes:
        out = bytearray(self._left)
        self._left = b""
        while n < 0 or len(out) < n:
            chunk = self._next()
            if not chunk:
                break
            out += chunk
        if 0 <= n < len(out):
            self._left = bytes(out[n:])
            del out[n:]
        return bytes(out)

    def close(self) -> None:
        if not self._done:
            self._done = True
            with contextlib.suppress(Exception):
                ray.cancel(self._stream)

    def __enter__(self) -> RemoteReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteWriter:
    """`WriteStream` to an upload handle on the agent, sent in chunks of <= CHUNK bytes."""

    def __init__(self, hop: Hop, handle: str, shown: str) -> None:
        self._hop = hop
        self._handle = handle
        self.shown = shown
        self._buffer = bytearray()
        self._open = True
        self._seq = 0
        self._flying: deque[Any] = deque()  # chunks sent, not yet answered

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer += data
        while len(self._buffer) >= CHUNK:
            self._send(bytes(self._buffer[:CHUNK]))
            del self._buffer[:CHUNK]

    def _send(self, data: bytes) -> None:
        """Sent without waiting (the agent writes them in order); at most WRITE_AHEAD wait
        for their answer, the first error is raised here or at commit."""
        self._flying.append(self._hop.actor.write.remote(self._handle, self._seq, data))
        self._seq += 1
        while len(self._flying) > WRITE_AHEAD:
            self._settle()

    def _settle(self) -> None:
        try:
            self._hop.get(self._flying.popleft())
        except BaseException:
            self._flying.clear()
            raise

    def commit(self) -> FileEntry:
        if self._buffer:
            self._send(bytes(self._buffer))
            self._buffer.clear()
        while self._flying:
            self._settle()
        self._open = False
        entry: FileEntry = self._hop.get(self._hop.actor.write_end.remote(self._handle, True))
        return entry

    def abort(self) -> None:
        if self._open:
            self._open = False
            self._hop.get(self._hop.actor.write_end.remote(self._handle, False))

    def __enter__(self) -> RemoteWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            with contextlib.suppress(Exception):
                self.abort()
        elif self._open:
            self.commit()


class RemoteFiles:
    """`OpenFiles` of one session on a node: each method one actor call (or a stream)."""

    def __init__(self, hop: Hop, tenant_id: str, session_id: str, root: Root) -> None:
        self._hop = hop
        self._where = Where(tenant=tenant_id, session=session_id, root=root)

    def _fields(self) -> dict[str, Any]:
        return self._where.model_dump()

    def _op(self, op: str, *args: str, **kwargs: Any) -> Any:
        return self._hop.call("files", wire(FileOp(**self._fields(), op=op, args=list(args),
                                                    kwargs=kwargs)))

    def stat(self, path: str) -> FileStat:
        found: FileStat = self._op("stat", path)
        return found

    def list(self, path: str = "") -> list[FileEntry]:
        found: list[FileEntry] = self._op("list", path)
        return found

    def usage_bytes(self) -> int:
        return int(self._op("usage_bytes"))

    def mkdir(self, path: str) -> FileStat:
        made: FileStat = self._op("mkdir", path)
        return made

    def delete(self, path: str) -> None:
        self._op("delete", path)

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> FileStat:
        moved: FileStat = self._op("move", src, dst, overwrite=overwrite)
        return moved

    def grep(self, pattern: str, path: str = "", *, glob: str | None = None,
             ignore_case: bool = False, max_results: int = 100,
             limits: SearchLimits | None = None) -> GrepResult:
        found: GrepResult = self._op("grep", pattern, path, glob=glob, ignore_case=ignore_case,
                                     max_results=max_results, limits=limits)
        return found

    def glob(self, pattern: str, path: str = "", *, max_results: int = 500,
             limits: SearchLimits | None = None) -> GlobResult:
        found: GlobResult = self._op("glob", pattern, path, max_results=max_results,
                                     limits=limits)
        return found

    def tree(self, path: str = "", *, depth: int = 3, max_entries: int = 1000,
             limits: SearchLimits | None = None) -> TreeResult:
        found: TreeResult = self._op("tree", path, depth=depth, max_entries=max_entries,
                                     limits=limits)
        return found

    def open_read(self, path: str, *, max_bytes: int | None = None) -> RemoteReader:
        stream: Any = self._hop.actor.read.options(
            num_returns="streaming", _generator_backpressure_num_objects=READ_AHEAD,
        ).remote(wire(ReadOp(**self._fields(), path=path, max_bytes=max_bytes)))
        try:
            return RemoteReader(self._hop, stream)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.cancel(stream)
            raise

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        with self.open_read(path, max_bytes=max_bytes) as reader:
            return reader.read()

    def writer(self, path: str, *, expected_size: int | None = None,
               max_bytes: int | None = None) -> RemoteWriter:
        handle, shown = self._hop.call("write_open", wire(WriteOpen(
            **self._fields(), path=path, expected_size=expected_size, max_bytes=max_bytes)))
        return RemoteWriter(self._hop, handle, shown)

    def write_bytes(self, path: str, data: bytes | bytearray | Iterable[bytes], *,
                    max_bytes: int | None = None) -> FileEntry:
        chunks = [data] if isinstance(data, bytes | bytearray) else data
        writer = self.writer(path, max_bytes=max_bytes)
        try:
            for chunk in chunks:
                writer.write(chunk)
        except BaseException:
            with contextlib.suppress(Exception):
                writer.abort()
            raise
        return writer.commit()

    def close(self) -> None:
        """Nothing is held here: each operation opened and closed the workspace there."""

    def __enter__(self) -> RemoteFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
