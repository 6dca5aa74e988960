"""A node agent seen from the control plane: `SessionNode` over Ray.

Why: the control plane keeps API, policy, audit and store; a session that lives on another
machine has its disk, files and containers there, in that node's agent
(`runtime.nodes.agent.NodeAgent`). `RemoteNode` is the same interface as `LocalNode`, so no
caller knows the difference.

- Files: every operation is one actor call (the agent opens the workspace, does it, closes
  it); reads stream in chunks of <= 1 MiB (a streaming generator, at most READ_AHEAD chunks
  ahead), writes go in chunks of <= 1 MiB to an upload handle (at most WRITE_AHEAD in
  flight, written in order there), then commit or abort. (64 KiB chunks, which Ray passes
  inline, were no faster: each is a task on the node, ≈ 1 ms under load.)
- Calls: the job is sent at once with a start gate; the node prepares the container (image,
  spec, warm take) while the write-ahead audit intent is written here, and runs nothing in
  it until `open_gate(exec_id, True)`, sent only once the intent is durable (False: the
  container is removed, nothing ran). So the intent's fsync overlaps the preparation as on
  one machine, for one more message. The node streams the output back as it comes, then
  the result. The node's after-call work does not wait for the outcome record (`settled`
  stays on this side).
- A dead or unreachable agent is `NodeUnavailable` (503, naming the node) from every method,
  after `on_lost(node_id)` so the cluster stops sending work there at once.

Blocking methods (disk, files) call `ray.get` and must run on a worker thread, as
`Workspaces` always did; the backend is async (ObjectRefs are awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import ray
import ray.exceptions
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from runtime.errors import NodeUnavailable
from runtime.nodes.agent import CHUNK, NodeAgent, actor_name
from runtime.nodes.failures import Failed, raise_failed
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk
from runtime.store.ids import check_session_id, check_tenant_id
from runtime.workspace.disk import WORKSPACE
from runtime.workspace.models import FileEntry, FileStat
from runtime.workspace.search import GlobResult, GrepResult, SearchLimits, TreeResult
from runtime.workspace.tmpdir import TMP, Root

T = TypeVar("T")
NAMESPACE = "navi"
OP_TIMEOUT_S = 60.0  # a file or disk operation the node does not answer in this is lost
READ_AHEAD = 4  # chunks a read may run ahead of its reader (4 MiB)
WRITE_AHEAD = 4  # chunks an upload may have in flight (4 MiB)
LOST = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
        ray.exceptions.GetTimeoutError, ray.exceptions.ObjectLostError,
        ray.exceptions.NodeDiedError, ray.exceptions.RaySystemError, ConnectionError)


class _Link:
    """The actor handle, its node id and what a failure of either means."""

    def __init__(self, node_id: str, actor: Any,
                 on_lost: Callable[[str], None] | None) -> None:
        self.node_id = node_id
        self.actor = actor
        self.on_lost = on_lost

    def lost(self, exc: BaseException) -> NodeUnavailable:
        if self.on_lost is not None:
            with contextlib.suppress(Exception):
                self.on_lost(self.node_id)
        return NodeUnavailable(self.node_id, f"node {self.node_id} is unavailable "
                               f"({type(exc).__name__})")

    def get(self, ref: Any) -> Any:
        """Wait for one answer (blocking); a `Failed` is raised as what it was."""
        try:
            value = ray.get(ref, timeout=OP_TIMEOUT_S)
        except LOST as exc:
            raise self.lost(exc) from None
        if isinstance(value, Failed):
            raise_failed(value)
        return value

    async def wait(self, ref: Awaitable[Any]) -> Any:
        try:
            value = await ref
        except LOST as exc:
            raise self.lost(exc) from None
        if isinstance(value, Failed):
            raise_failed(value)
        return value


class RemoteReader:
    """`ReadStream` over the agent's streaming `read`: size and mtime first, then chunks."""

    def __init__(self, link: _Link, stream: Any) -> None:
        self._link = link
        self._stream = stream
        self._left = b""
        self._done = False
        self.size, self.mtime = link.get(next(stream))  # raises the agent's error, if any

    def _next(self) -> bytes:
        if self._done:
            return b""
        try:
            ref = next(self._stream)
        except StopIteration:
            self._done = True
            return b""
        chunk: bytes = self._link.get(ref)
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

    def __init__(self, link: _Link, handle: str, shown: str) -> None:
        self._link = link
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
        self._flying.append(self._link.actor.write.remote(self._handle, self._seq, data))
        self._seq += 1
        while len(self._flying) > WRITE_AHEAD:
            self._settle()

    def _settle(self) -> None:
        try:
            self._link.get(self._flying.popleft())
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
        entry: FileEntry = self._link.get(self._link.actor.write_end.remote(self._handle, True))
        return entry

    def abort(self) -> None:
        if self._open:
            self._open = False
            self._link.get(self._link.actor.write_end.remote(self._handle, False))

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

    def __init__(self, link: _Link, tenant_id: str, session_id: str, root: Root) -> None:
        self._link = link
        self._where = (tenant_id, session_id, root)

    def _op(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return self._link.get(self._link.actor.files.remote(*self._where, op, *args, **kwargs))

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
        stream: Any = self._link.actor.read.options(
            num_returns="streaming", _generator_backpressure_num_objects=READ_AHEAD,
        ).remote(*self._where, path, max_bytes)
        try:
            return RemoteReader(self._link, stream)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.cancel(stream)
            raise

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        with self.open_read(path, max_bytes=max_bytes) as reader:
            return reader.read()

    def writer(self, path: str, *, expected_size: int | None = None,
               max_bytes: int | None = None) -> RemoteWriter:
        handle, shown = self._link.get(self._link.actor.write_open.remote(
            *self._where, path, expected_size, max_bytes))
        return RemoteWriter(self._link, handle, shown)

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


class RemoteBackend:
    """`SandboxBackend` of a node: runs go to its agent, output streams back."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        link = self._link
        gated = before_start is not None
        try:
            stream: Any = link.actor.run.options(num_returns="streaming").remote(request, gated)
        except LOST as exc:
            raise link.lost(exc) from None
        if before_start is not None:  # the node prepares meanwhile; nothing runs before:
            try:
                await before_start
            except BaseException:
                link.actor.open_gate.remote(request.exec_id, False)  # nothing runs
                with contextlib.suppress(Exception):
                    ray.cancel(stream)
                raise
            link.actor.open_gate.remote(request.exec_id, True)  # the intent is durable
        try:
            while True:
                try:
                    ref = await stream.__anext__()
                except StopAsyncIteration:
                    break
                except LOST as exc:
                    raise link.lost(exc) from None
                for item in await link.wait(ref):  # a batch: chunks, then maybe the result
                    if isinstance(item, OutputChunk):
                        if on_output is not None:
                            await on_output(item)
                    elif isinstance(item, ExecResult):
                        return item
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(stream)
            raise
        raise link.lost(RuntimeError("the run ended without a result"))

    async def kill(self, exec_id: str) -> None:
        await self._link.wait(self._link.actor.kill.remote(exec_id))

    async def release_session(self, session: str) -> None:
        await self._link.wait(self._link.actor.release_session.remote(session))

    async def close(self) -> None:
        """The agent outlives this control plane: nothing to close."""


class RemoteNode:
    """`SessionNode` of a node agent (`agent_for` finds or makes one)."""

    def __init__(self, node_id: str, actor: Any, workspaces_root: Path, *,
                 on_lost: Callable[[str], None] | None = None) -> None:
        self._link = _Link(node_id, actor, on_lost)
        self._backend = RemoteBackend(self._link)
        self.workspaces_root = workspaces_root

    @property
    def id(self) -> str:
        return self._link.node_id

    @property
    def backend(self) -> RemoteBackend:
        return self._backend

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._link.get(getattr(self._link.actor, method).remote(*args, **kwargs))

    def create(self, tenant_id: str, session_id: str, *, uid: int | None = None,
               disk_bytes: int | None = None, tenant_disk_bytes: int | None = None) -> Path:
        return Path(self._call("create", tenant_id, session_id, uid, disk_bytes,
                               tenant_disk_bytes))

    def remove(self, tenant_id: str, session_id: str) -> bool:
        return bool(self._call("remove", tenant_id, session_id))

    def _session_dir(self, tenant_id: str, session_id: str) -> Path:
        return self.workspaces_root / check_tenant_id(tenant_id) / check_session_id(session_id)

    def verify(self, tenant_id: str, session_id: str) -> Path:
        """The workspace's path on the node, no hop: the agent verifies it (and mounts the
        disk) itself before a call runs with it."""
        return self._session_dir(tenant_id, session_id) / WORKSPACE

    def tmp_path(self, tenant_id: str, session_id: str) -> Path:
        return self._session_dir(tenant_id, session_id) / TMP

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> RemoteFiles:
        return RemoteFiles(self._link, tenant_id, session_id, root)


def agent_for(node_id: str, ray_node_id: str, *, on_lost: Callable[[str], None] | None = None,
              data_dir: str | None = None, disks: bool | None = None) -> RemoteNode:
    """The node's agent, found by name or made (detached, pinned to the Ray node, on its
    `navi_node` resource) and started; blocking (call it on a worker thread, with Ray
    joined in namespace "navi")."""
    actor: Any = ray.remote(NodeAgent).options(
        name=actor_name(node_id), namespace=NAMESPACE, lifetime="detached",
        get_if_exists=True, num_cpus=0, resources={"navi_node": 0.01}, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node_id, soft=False),
    ).remote(node_id, data_dir, disks)
    link = _Link(node_id, actor, on_lost)
    info = link.get(actor.ready.remote())
    return RemoteNode(node_id, actor, Path(info["workspaces_root"]), on_lost=on_lost)
