"""Safe host-side access to session workspaces: every read, write, listing and deletion of a
session's files by the supervisor goes through this package.

Sandboxed code can put anything into its workspace (symlinks to ``/etc``, FIFOs, hard links,
huge or deep trees); the supervisor reads it as root. Paths are validated
(``split_path``: no ``..``, absolute, empty, NUL, backslash, percent escapes, overlong, NFKC
tricks) and then resolved fd-relatively beneath the workspace root with ``openat2``
(``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV``) or an
``O_NOFOLLOW`` walk. Only regular files with one link and directories are served; everything
else is ``InvalidPath`` (400). Limits raise ``PayloadTooLarge`` (413); a missing file is
``NotFound`` (404); an existing move target ``Conflict`` (409). Messages carry only the
client's relative path, never a host path.

Public API (synchronous; from async code call through ``asyncio.to_thread``)::

    wss = Workspaces(root, sandbox_uid=65534, limits=WorkspaceLimits())
    wss = Workspaces.from_settings(settings)          # root = <data_dir>/workspaces
    wss.create(tenant_id, session_id) -> Path         # idempotent; bind-mount source
    wss.path(tenant_id, session_id) -> Path           # no I/O
    wss.verify(tenant_id, session_id) -> Path         # re-check right before mounting
    wss.open(tenant_id, session_id) -> Workspace      # NotFound if absent; close() / with
    wss.remove(tenant_id, session_id) -> bool         # rmtree, never follows links

    ws.stat(path) -> FileStat{path, kind, size, mtime}   # "" = the workspace itself
    ws.open_read(path) -> FileReader                  # .size, .mtime; iterate for chunks
    ws.read_bytes(path, max_bytes=None) -> bytes
    ws.writer(path, expected_size=None, max_bytes=None) -> AtomicWriter
                                                      # with-block: .write(chunk); commit
    ws.write_bytes(path, data | chunks, max_bytes=None) -> FileEntry   # atomic
    ws.list(path="") -> list[FileEntry{path, size, mtime}]             # regular files
    ws.mkdir(path) -> FileStat
    ws.delete(path) -> None                           # file or whole directory
    ws.move(src, dst, overwrite=False) -> FileStat
    ws.usage_bytes() -> int

Streaming download: ``reader = ws.open_read(p)`` raises before any response is started, then
``StreamingResponse(reader, headers={"Content-Length": str(reader.size)})``; the reader
yields at most ``size`` bytes and closes itself. Upload: ``with ws.writer(p,
expected_size=content_length) as w: async for chunk in request.stream(): w.write(chunk)``.
"""

from runtime.workspace.fs import openat2_available
from runtime.workspace.manager import Workspaces
from runtime.workspace.models import FileEntry, FileStat, WorkspaceLimits
from runtime.workspace.paths import MAX_COMPONENT_BYTES, MAX_DEPTH, MAX_PATH_BYTES, split_path
from runtime.workspace.streams import AtomicWriter, FileReader
from runtime.workspace.workspace import Workspace

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_DEPTH",
    "MAX_PATH_BYTES",
    "AtomicWriter",
    "FileEntry",
    "FileReader",
    "FileStat",
    "Workspace",
    "WorkspaceLimits",
    "Workspaces",
    "openat2_available",
    "split_path",
]
