"""Low-level, fd-relative file-system primitives that never follow a link out of a workspace.

Everything here works relative to an open directory fd. Paths are resolved by ``openat2(2)``
with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`` when
the kernel has it (Linux >= 5.6, called through ``syscall(2)`` with ctypes), otherwise by a
component-by-component walk with ``O_NOFOLLOW | O_DIRECTORY`` and a same-device check. Either
way a symlink anywhere in the path (including the last component) is refused, a swapped-in
symlink is never followed, and a mount point is never crossed.

Final components are opened with ``O_NONBLOCK | O_NOCTTY`` (a FIFO never blocks, a tty never
becomes ours), then ``fstat``-ed: only regular files with one link and directories pass.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import stat
from typing import Literal, NoReturn

from runtime.errors import (
    Conflict,
    DiskQuotaExceeded,
    InvalidPath,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
)

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_FLAGS = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
RENAME_NOREPLACE = 0x1

# openat2 has the same number on every architecture that uses the generic table.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "riscv64": 437, "armv7l": 437,
                "ppc64le": 437, "s390x": 437}.get(platform.machine())
_OPEN_BASE = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK

Kind = Literal["file", "dir"]


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _openat2(dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
    assert _SYS_OPENAT2 is not None
    # openat2 is strict: a mode without O_CREAT/O_TMPFILE is EINVAL.
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, RESOLVE_FLAGS)
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    encoded = os.fsencode(path)
    for _ in range(16):  # EAGAIN: a concurrent rename/mount; the kernel asks us to retry
        fd = syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_long(dir_fd),
                     ctypes.c_char_p(encoded), ctypes.byref(how),
                     ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


@functools.cache
def openat2_available() -> bool:
    """Whether ``openat2`` works here (kernel >= 5.6 and not filtered by seccomp)."""
    if _SYS_OPENAT2 is None:
        return False
    root = os.open("/", DIR_FLAGS | os.O_CLOEXEC)
    try:
        os.close(_openat2(root, ".", DIR_FLAGS | os.O_CLOEXEC))
        return True
    except OSError:
        return False
    finally:
        os.close(root)


def oserror_to_navi(exc: OSError, shown: str) -> Exception:
    """Translate an ``OSError`` of a workspace operation into the runtime's error tree.

    ``shown`` is the client's relative path: messages never carry host paths.
    """
    code = exc.errno
    if code is None:  # e.g. shutil.rmtree: "Cannot call rmtree on a symbolic link"
        return InvalidPath(f"invalid path: not a regular file or directory: {shown}")
    if code == errno.ENOENT:
        return NotFound(f"no such file or directory: {shown}")
    if code in (errno.ELOOP, errno.EMLINK):
        return InvalidPath(f"invalid path: symbolic links are not allowed: {shown}")
    if code == errno.EXDEV:
        return InvalidPath(f"invalid path: leaves the workspace: {shown}")
    if code == errno.ENOTDIR:
        return InvalidPath(f"invalid path: a component is not a directory: {shown}")
    if code == errno.EISDIR:
        return InvalidPath(f"invalid path: is a directory: {shown}")
    if code == errno.ENXIO:
        return InvalidPath(f"invalid path: not a regular file or directory: {shown}")
    if code == errno.ENAMETOOLONG:
        return InvalidPath(f"invalid path: name too long: {shown}")
    if code in (errno.ENOTEMPTY, errno.EEXIST):
        return Conflict(f"already exists: {shown}")
    if code == errno.EINVAL:
        return InvalidPath(f"invalid path: operation not possible: {shown}")
    if code in (errno.ENOSPC, errno.EDQUOT):
        return DiskQuotaExceeded("the session's disk quota is used up (no space left)")
    if code == errno.EFBIG:
        return PayloadTooLarge("file too large")
    if code in (errno.EACCES, errno.EPERM):  # the sandbox uid's mode bits say no
        return PermissionDenied(f"permission denied: {shown}")
    return exc


def raise_mapped(exc: OSError, shown: str) -> NoReturn:
    """Raise ``exc`` translated by ``oserror_to_navi`` (unchanged if it has no translation)."""
    mapped = oserror_to_navi(exc, shown)
    if mapped is exc:
        raise exc
    raise mapped from exc


def classify(st: os.stat_result, shown: str) -> Kind:
    """``file`` or ``dir``; anything else (symlink, FIFO, socket, device, hard link) refused."""
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        # nlink 0 is a file replaced after we opened it: a complete old version, no link.
        if st.st_nlink > 1:
            raise InvalidPath(f"invalid path: hard-linked files are not allowed: {shown}")
        return "file"
    if stat.S_ISLNK(st.st_mode):
        raise InvalidPath(f"invalid path: symbolic links are not allowed: {shown}")
    raise InvalidPath(f"invalid path: not a regular file or directory: {shown}")


class Resolver:
    """Opens paths beneath a root directory fd. ``use_openat2=None`` picks automatically."""

    def __init__(self, root_fd: int, *, use_openat2: bool | None = None) -> None:
        self.root_fd = root_fd
        self.root_dev = os.fstat(root_fd).st_dev
        self.use_openat2 = openat2_available() if use_openat2 is None else use_openat2
        if self.use_openat2 and not openat2_available():
            raise OSError(errno.ENOSYS, "openat2 is not available")

    def _check_dev(self, fd: int) -> None:
        if os.fstat(fd).st_dev != self.root_dev:
            os.close(fd)
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    def open_child(self, dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
        """Open one component ``name`` (no '/') inside ``dir_fd``, never following a link."""
        if self.use_openat2:
            return _openat2(dir_fd, name, flags | _OPEN_BASE, mode)
        try:
            fd = os.open(name, flags | _OPEN_BASE, mode, dir_fd=dir_fd)
        except NotADirectoryError:
            # O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR; report it as the link it is.
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
            raise
        self._check_dev(fd)
        return fd

    def open(self, parts: tuple[str, ...], flags: int) -> int:
        """Open ``parts`` beneath the root; ``()`` opens the root itself (a new fd)."""
        if not parts:
            return self.open_child(self.root_fd, ".", flags)
        if self.use_openat2:
            return _openat2(self.root_fd, "/".join(parts), flags | _OPEN_BASE)
        cur = self.root_fd
        try:
            for name in parts[:-1]:
                nxt = self.open_child(cur, name, DIR_FLAGS)
                if cur != self.root_fd:
                    os.close(cur)
                cur = nxt
            return self.open_child(cur, parts[-1], flags)
        finally:
            if cur != self.root_fd:
                os.close(cur)

    def open_dir(self, parts: tuple[str, ...], *, create: bool = False,
                 owner: tuple[int, int] | None = None, mode: int = 0o770) -> int:
        """Open directory ``parts``; with ``create``, make missing ones (``mode``, ``owner``)."""
        if not create:
            return self.open(parts, DIR_FLAGS)
        cur = os.dup(self.root_fd)
        try:
            for name in parts:
                try:
                    nxt = self.open_child(cur, name, DIR_FLAGS)
                except FileNotFoundError:
                    try:
                        os.mkdir(name, 0o700, dir_fd=cur)
                    except FileExistsError:
                        pass  # raced with the sandbox: open whatever is there, safely
                    nxt = self.open_child(cur, name, DIR_FLAGS)
                    if owner is not None:
                        os.fchown(nxt, *owner)
                    os.fchmod(nxt, mode)
                os.close(cur)
                cur = nxt
            return cur
        except BaseException:
            os.close(cur)
            raise

    def lstat_child(self, dir_fd: int, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)

    def rename(self, src_dir: int, src: str, dst_dir: int, dst: str, *,
               replace: bool) -> None:
        """``renameat``; without ``replace``, ``renameat2(RENAME_NOREPLACE)`` (no clobbering)."""
        if replace:
            os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
            return
        fn = getattr(_libc(), "renameat2", None)
        if fn is None:  # very old libc: check-then-rename (the race only clobbers sandbox data)
            try:
                os.stat(dst, dir_fd=dst_dir, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
                return
            raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
        fn.restype = ctypes.c_int
        rc = fn(ctypes.c_int(src_dir), ctypes.c_char_p(os.fsencode(src)), ctypes.c_int(dst_dir),
                ctypes.c_char_p(os.fsencode(dst)), ctypes.c_uint(RENAME_NOREPLACE))
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), dst)
