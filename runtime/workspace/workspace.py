"""One session's files, as the host sees them: every host-side access goes through here.

Sandboxed code owns the workspace and may leave symlinks, FIFOs, hard links, deep trees and
huge files in it; the supervisor reads it as root. A ``Workspace`` therefore holds an fd of the
workspace root and reaches everything else fd-relatively through ``fs.Resolver`` (``openat2``
with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or an ``O_NOFOLLOW`` walk), after the path has
passed ``paths.split_path``. Only regular single-link files and directories are ever read,
written, listed, moved or deleted; everything else is ``InvalidPath`` (HTTP 400).

Methods block (plain system calls); async callers run them in a thread (``asyncio.to_thread``
or starlette's ``run_in_threadpool``). Size limits (``WorkspaceLimits``) raise
``PayloadTooLarge``; the disk-limit check is per write and not atomic across concurrent writers.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from runtime.errors import Conflict, DiskQuotaExceeded, InvalidPath, PayloadTooLarge
from runtime.workspace.actas import as_owner
from runtime.workspace.fs import DIR_FLAGS, READ_FLAGS, Resolver, classify, raise_mapped
from runtime.workspace.models import FileEntry, FileStat, WorkspaceLimits
from runtime.workspace.paths import join_parts, split_path
from runtime.workspace.patterns import Glob, LinePattern
from runtime.workspace.scan import ScanLimitExceeded, walk
from runtime.workspace.search import (
    GlobResult,
    GrepResult,
    SearchLimits,
    TreeResult,
    glob_paths,
    grep,
    tree,
)
from runtime.workspace.streams import AtomicWriter, FileReader, check_replaceable


class Workspace:
    """Safe operations on one workspace directory. Takes ownership of ``root_fd``."""

    def __init__(
        self,
        root_fd: int,
        *,
        limits: WorkspaceLimits | None = None,
        owner: tuple[int, int] | None = None,
        use_openat2: bool | None = None,
        own_disk: bool = False,
        acting: tuple[int, int] | None = None,
    ) -> None:
        self._root_fd = root_fd
        # every operation runs with these fsuid/fsgid (the sandbox's): its mode bits bind us
        self.acting = acting
        self.own_disk = own_disk  # on a filesystem of its own: its free space is the limit
        try:
            self._resolver = Resolver(root_fd, use_openat2=use_openat2)
        except BaseException:
            os.close(root_fd)
            raise
        self.limits = limits or WorkspaceLimits()
        self.owner = owner

    @classmethod
    def at(cls, path: str | os.PathLike[str], **kwargs: object) -> Workspace:
        """Open the workspace directory at a trusted host ``path`` (its last component must
        not be a symlink)."""
        fd = os.open(Path(path), DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC)
        return cls(fd, **kwargs)  # type: ignore[arg-type]

    @property
    def uses_openat2(self) -> bool:
        return self._resolver.use_openat2

    def close(self) -> None:
        if self._root_fd >= 0:
            fd, self._root_fd = self._root_fd, -1
            os.close(fd)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_root_fd", -1) >= 0:
            self.close()

    # -- helpers -----------------------------------------------------------------------------

    def _live(self) -> Resolver:
        if self._root_fd < 0:
            raise ValueError("workspace is closed")
        return self._resolver

    def _open(self, parts: tuple[str, ...], shown: str, flags: int) -> int:
        try:
            return self._live().open(parts, flags)
        except OSError as exc:
            raise_mapped(exc, shown)

    def _open_parent(self, parts: tuple[str, ...], shown: str, *, create: bool) -> int:
        try:
            return self._live().open_dir(parts[:-1], create=create, owner=self.owner)
        except OSError as exc:
            raise_mapped(exc, shown)

    # -- reading -----------------------------------------------------------------------------

    @as_owner
    def stat(self, path: str) -> FileStat:
        """Kind, size and mtime of a file or directory (``""`` is the workspace itself)."""
        parts = split_path(path, allow_root=True)
        shown = join_parts(parts)
        st = _stat_and_close(self._open(parts, shown, READ_FLAGS))
        kind = classify(st, shown)
        return FileStat(path=shown, kind=kind, size=st.st_size if kind == "file" else 0,
                        mtime=st.st_mtime)

    @as_owner
    def open_read(self, path: str) -> FileReader:
        """Open a regular file for streaming (``reader.size`` for Content-Length)."""
        parts = split_path(path)
        shown = join_parts(parts)
        fd = self._open(parts, shown, READ_FLAGS)
        try:
            st = os.fstat(fd)
            if classify(st, shown) != "file":
                raise InvalidPath(f"invalid path: is a directory: {shown}")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return FileReader(fd, shown, st)

    @as_owner
    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The whole file; ``PayloadTooLarge`` above ``max_bytes`` (default: the limits')."""
        cap = self.limits.max_read_bytes if max_bytes is None else max_bytes
        with self.open_read(path) as reader:
            if reader.size > cap:
                raise PayloadTooLarge(f"file is larger than {cap} bytes", limit=cap)
            return reader.read()

    @as_owner
    def list(self, path: str = "") -> list[FileEntry]:
        """Regular files under ``path``, recursively, sorted; never follows links.

        Symlinks, special files, hard links and names a client could not address are skipped;
        at most ``limits.max_list_entries`` files are returned.
        """
        parts = split_path(path, allow_root=True)
        shown = join_parts(parts)
        fd = self._open(parts, shown, DIR_FLAGS)
        found: list[FileEntry] = []
        try:
            for item in walk(self._resolver, fd, shown, self.limits.max_scan_entries):
                if item.listable:
                    found.append(FileEntry(path=item.path, size=item.st.st_size,
                                           mtime=item.st.st_mtime))
                    if len(found) >= self.limits.max_list_entries:
                        break
        except ScanLimitExceeded:
            pass
        finally:
            os.close(fd)
        return sorted(found, key=lambda e: e.path)

    @as_owner
    def usage_bytes(self) -> int:
        """Apparent size of all regular files (sparse files count fully: conservative)."""
        fd = self._live().open((), DIR_FLAGS)
        total = 0
        try:
            for item in walk(self._resolver, fd, "", self.limits.max_scan_entries):
                if item.st.st_mode & 0o170000 == 0o100000:
                    total += item.st.st_size
        except ScanLimitExceeded:
            raise PayloadTooLarge(
                f"workspace holds more than {self.limits.max_scan_entries} entries"
            ) from None
        finally:
            os.close(fd)
        return total

    @as_owner
    def disk_left(self, replaced: int = 0) -> int:
        """Bytes a new file may take: the free space of the session's own filesystem (the
        kernel's limit), else the configured limit less what the files hold."""
        if self.own_disk:
            st = os.fstatvfs(self._live().root_fd)
            return st.f_bavail * st.f_frsize
        return max(0, self.limits.max_disk_bytes - (self.usage_bytes() - replaced))

    # -- searching (read-only, bounded: runtime.workspace.search) ------------------------------

    @as_owner
    def grep(self, pattern: str, path: str = "", *, glob: str | None = None,
             ignore_case: bool = False, max_results: int = 100,
             limits: SearchLimits | None = None) -> GrepResult:
        """Lines matching the RE2 ``pattern`` in the file ``path`` or the files under it
        (``glob`` filters their names)."""
        compiled = LinePattern.compile(pattern, ignore_case=ignore_case)
        matcher = Glob.compile(glob) if glob else None
        limits = limits or SearchLimits()
        parts = split_path(path, allow_root=True)
        shown = join_parts(parts)
        kind = self.stat(shown).kind
        if kind == "dir":
            fd = self._open(parts, shown, DIR_FLAGS)
            single = None
        else:
            fd = self._open_parent(parts, shown, create=False)
            single = parts[-1]
        try:
            return grep(self._resolver, fd, shown, compiled, glob=matcher,
                        max_results=max_results, limits=limits, single=single)
        finally:
            os.close(fd)

    @as_owner
    def glob(self, pattern: str, path: str = "", *, max_results: int = 500,
             limits: SearchLimits | None = None) -> GlobResult:
        """Regular files under the directory ``path`` whose path matches the glob."""
        matcher = Glob.compile(pattern)
        parts = split_path(path, allow_root=True)
        shown = join_parts(parts)
        fd = self._open(parts, shown, DIR_FLAGS)
        try:
            return glob_paths(self._resolver, fd, shown, matcher, max_results=max_results,
                              limits=limits or SearchLimits())
        finally:
            os.close(fd)

    @as_owner
    def tree(self, path: str = "", *, depth: int = 3, max_entries: int = 1000,
             limits: SearchLimits | None = None) -> TreeResult:
        """Directories and regular files under the directory ``path``, ``depth`` levels."""
        parts = split_path(path, allow_root=True)
        shown = join_parts(parts)
        fd = self._open(parts, shown, DIR_FLAGS)
        try:
            return tree(self._resolver, fd, shown, depth=depth, max_entries=max_entries,
                        limits=limits or SearchLimits())
        finally:
            os.close(fd)

    # -- writing -----------------------------------------------------------------------------

    @as_owner
    def writer(self, path: str, *, expected_size: int | None = None,
               max_bytes: int | None = None) -> AtomicWriter:
        """An atomic writer for ``path`` (parents created), capped by the upload limit
        (``max_bytes`` or ``limits.max_file_bytes``) and the session disk limit.

        ``expected_size`` (e.g. Content-Length) fails fast before any byte is written.
        """
        parts = split_path(path)
        shown = join_parts(parts)
        file_cap = self.limits.max_file_bytes if max_bytes is None else max_bytes
        dir_fd = self._open_parent(parts, shown, create=True)
        try:
            existing = check_replaceable(self._resolver, dir_fd, parts[-1], shown,
                                         writable=True)
            disk_left = self.disk_left(existing)
        except BaseException:
            os.close(dir_fd)
            raise

        def too_large() -> PayloadTooLarge:
            if file_cap <= disk_left:
                return PayloadTooLarge(f"file exceeds the upload limit of {file_cap} bytes",
                                       limit=file_cap)
            return DiskQuotaExceeded(
                f"the session's disk quota would be exceeded ({disk_left} bytes left)",
                limit=self.limits.max_disk_bytes,
            )

        budget = min(file_cap, disk_left)
        if expected_size is not None and expected_size > budget:
            os.close(dir_fd)
            raise too_large()
        return AtomicWriter(self._resolver, dir_fd, parts[-1], shown, budget=budget,
                            too_large=too_large, owner=self.owner, acting=self.acting)

    @as_owner
    def write_bytes(self, path: str, data: bytes | bytearray | Iterable[bytes], *,
                    max_bytes: int | None = None) -> FileEntry:
        """Atomically create or replace ``path`` with ``data`` (bytes or an iterable of chunks)."""
        size = len(data) if isinstance(data, bytes | bytearray | memoryview) else None
        out = self.writer(path, expected_size=size, max_bytes=max_bytes)
        try:
            if isinstance(data, bytes | bytearray | memoryview):
                out.write(data)
            else:
                for chunk in data:
                    out.write(chunk)
        except BaseException:
            out.abort()
            raise
        return out.commit()

    @as_owner
    def mkdir(self, path: str) -> FileStat:
        """Create ``path`` and missing parents (``0o770``, sandbox-owned); fine if it exists."""
        parts = split_path(path)
        shown = join_parts(parts)
        try:
            fd = self._live().open_dir(parts, create=True, owner=self.owner)
        except OSError as exc:
            raise_mapped(exc, shown)
        st = _stat_and_close(fd)
        return FileStat(path=shown, kind="dir", size=0, mtime=st.st_mtime)

    @as_owner
    def delete(self, path: str) -> None:
        """Remove a file, or a directory with everything in it (``shutil.rmtree``'s fd-based,
        symlink-attack-safe variant: links inside are unlinked, never followed)."""
        parts = split_path(path)
        shown = join_parts(parts)
        if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux always has it
            raise RuntimeError("shutil.rmtree is not symlink-attack safe on this platform")
        dir_fd = self._open_parent(parts, shown, create=False)
        try:
            kind = classify(self._resolver.lstat_child(dir_fd, parts[-1]), shown)
            if kind == "dir":
                shutil.rmtree(parts[-1], dir_fd=dir_fd)
            else:
                os.unlink(parts[-1], dir_fd=dir_fd)
        except OSError as exc:
            raise_mapped(exc, shown)
        finally:
            os.close(dir_fd)

    @as_owner
    def move(self, src: str, dst: str, *, overwrite: bool = False) -> FileStat:
        """Rename ``src`` to ``dst`` (parents of ``dst`` created). ``Conflict`` if ``dst``
        exists, unless ``overwrite`` and both are regular files."""
        sparts, dparts = split_path(src), split_path(dst)
        sshown, dshown = join_parts(sparts), join_parts(dparts)
        if dparts[: len(sparts)] == sparts:
            raise InvalidPath("invalid path: cannot move a path into itself")
        src_fd = self._open_parent(sparts, sshown, create=False)
        try:
            kind = classify(self._resolver.lstat_child(src_fd, sparts[-1]), sshown)
            dst_fd = self._open_parent(dparts, dshown, create=True)
            try:
                if overwrite and kind == "file":
                    check_replaceable(self._resolver, dst_fd, dparts[-1], dshown)
                try:
                    self._resolver.rename(src_fd, sparts[-1], dst_fd, dparts[-1],
                                          replace=overwrite and kind == "file")
                except FileExistsError:
                    raise Conflict(f"already exists: {dshown}") from None
            finally:
                os.close(dst_fd)
        except OSError as exc:
            raise_mapped(exc, sshown)
        finally:
            os.close(src_fd)
        return self.stat(dshown)


def _stat_and_close(fd: int) -> os.stat_result:
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)
