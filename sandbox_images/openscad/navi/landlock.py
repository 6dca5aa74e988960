"""Landlock for the CAD sandbox: after `restrict()`, this process and its children can open
only the paths they were granted (an unprivileged, inherited, irreversible kernel rule set).

Why: the container already keeps the host out, but OpenSCAD's `import()`, `include`, `use`
and `surface()` take arbitrary paths, and the container itself holds files a model has no
business reading (`/etc/passwd`, the engine-written `/etc/hosts` and `/etc/resolv.conf`,
`/proc`). Landlock lets OpenSCAD read only the session workspace, `/tmp` and the few
read-only system paths it needs to start. Stdlib only (ctypes); no compiled helper.

If the kernel has no Landlock (older than 5.13, or not in the LSM list), `restrict` raises
`LandlockUnavailable` and the caller refuses to run: confinement fails closed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterable

SYS_CREATE_RULESET = 444  # the same numbers on x86_64 and aarch64 (generic syscall table)
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE
WRITE = (
    READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SYM | REFER
    | TRUNCATE
)


class LandlockUnavailable(RuntimeError):
    """The kernel cannot confine this process."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(*args: object) -> int:
    result = int(_libc.syscall(*args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when there is none."""
    try:
        return _syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                        ctypes.c_uint32(CREATE_RULESET_VERSION))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return 0
        raise


def _handled(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def restrict(rules: Iterable[tuple[str, int]]) -> int:
    """Allow exactly `rules` (path, rights) from now on; returns the ABI version used.

    A path that does not exist is skipped (nothing to reach there anyway). Rights a file
    (not a directory) cannot carry are dropped for it, as the kernel requires.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable("the kernel offers no Landlock (needs Linux 5.13+ with it on)")
    handled = _handled(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    ruleset = _syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr),
                       ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                allowed = rights & handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= FILE_ONLY
                beneath = _PathBeneathAttr(allowed_access=allowed, parent_fd=fd)
                _syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset),
                         ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(beneath),
                         ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockUnavailable("prctl(PR_SET_NO_NEW_PRIVS) failed")
        _syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi
