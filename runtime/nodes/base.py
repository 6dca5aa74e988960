"""The node interface: what a session needs from the machine it lives on.

`OpenFiles` is what `runtime.workspace.Workspace` offers (it implements it as is); a remote
node's files implement the same methods over the hop. `SessionNode` adds the session disk's
life cycle and the node's sandbox backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from runtime.sandbox.backend import SandboxBackend
from runtime.workspace.disk import NOTHING, TenantBytes
from runtime.workspace.models import FileEntry, FileStat
from runtime.workspace.search import GlobResult, GrepResult, SearchLimits, TreeResult
from runtime.workspace.tmpdir import Root

LOCAL = "local"  # the node id of this process's own engine and disks (no cluster)


class ReadStream(Protocol):
    """A file being read: its size and mtime known before the first byte; iterate for
    chunks (it closes itself at the end)."""

    @property
    def size(self) -> int: ...

    @property
    def mtime(self) -> float: ...

    def __iter__(self) -> Iterator[bytes]: ...

    def read(self, n: int = -1) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> ReadStream: ...

    def __exit__(self, *exc: object) -> None: ...


class WriteStream(Protocol):
    """A file being written atomically: nothing shows until `commit`; `abort` drops it."""

    @property
    def shown(self) -> str: ...

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def commit(self) -> FileEntry: ...

    def abort(self) -> None: ...


class OpenFiles(Protocol):
    """One session's files, open (a lease on its disk until `close`). Paths are
    workspace-relative; errors are `runtime.errors` (InvalidPath, NotFound, ...)."""

    def stat(self, path: str) -> FileStat: ...

    def open_read(self, path: str) -> ReadStream: ...

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes: ...

    def list(self, path: str = "") -> list[FileEntry]: ...

    def usage_bytes(self) -> int: ...

    def writer(self, path: str, *, expected_size: int | None = None,
               max_bytes: int | None = None) -> WriteStream: ...

    def write_bytes(self, path: str, data: bytes | bytearray | Iterable[bytes], *,
                    max_bytes: int | None = None) -> FileEntry: ...

    def mkdir(self, path: str) -> FileStat: ...

    def delete(self, path: str) -> None: ...

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> FileStat: ...

    def grep(self, pattern: str, path: str = "", *, glob: str | None = None,
             ignore_case: bool = False, max_results: int = 100,
             limits: SearchLimits | None = None) -> GrepResult: ...

    def glob(self, pattern: str, path: str = "", *, max_results: int = 500,
             limits: SearchLimits | None = None) -> GlobResult: ...

    def tree(self, path: str = "", *, depth: int = 3, max_entries: int = 1000,
             limits: SearchLimits | None = None) -> TreeResult: ...

    def close(self) -> None: ...


class SessionNode(Protocol):
    """The machine a session lives on: its disk, its files, its sandbox backend.

    Disk and file methods are blocking (call them through `asyncio.to_thread`); a dead
    remote node raises `runtime.errors.NodeUnavailable` from any of them."""

    @property
    def id(self) -> str: ...

    @property
    def backend(self) -> SandboxBackend: ...

    def create(self, tenant_id: str, session_id: str, *, uid: int | None = None,
               disk_bytes: int | None = None, tenant_disk_bytes: int | None = None,
               elsewhere: TenantBytes = NOTHING) -> Path:
        """Make the session's disk and workspace; its workspace path on the node. Its disk
        is admitted against `tenant_disk_bytes` with the tenant's bytes on the node and
        `elsewhere` (on the cluster's other machines: `runtime.nodes.elsewhere`)."""
        ...

    def tenant_bytes(self, tenant_id: str) -> TenantBytes:
        """What the tenant holds on the node, as its disk quota counts it."""
        ...

    def remove(self, tenant_id: str, session_id: str) -> bool: ...

    def verify(self, tenant_id: str, session_id: str) -> Path:
        """The workspace path on the node, checked right before a call mounts it."""
        ...

    def tmp_path(self, tenant_id: str, session_id: str) -> Path:
        """The session's /tmp directory on the node (no I/O). A remote node returns names
        (`runtime.nodes.wire.SESSION_TMP`) that its agent resolves, never its paths."""
        ...

    def open(self, tenant_id: str, session_id: str, *, root: Root = "workspace"
             ) -> OpenFiles:
        """The session's files under its workspace, or its /tmp (`root="tmp"`)."""
        ...

    def state(self, tenant_id: str, session_id: str) -> str:
        """`active` while the session's disk is mounted on the node, else `idle`."""
        ...
