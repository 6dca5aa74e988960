"""Do a session's file operations with the sandbox uid's permissions, not root's.

The supervisor runs as root, so without this a file the sandbox made unreadable (``chmod 000``)
or read-only would still be read or replaced through the files API. ``acting_as(uid, gid)``
switches the *calling thread's* filesystem ids (``setfsuid``/``setfsgid`` are per-thread
system calls; glibc does not broadcast them to other threads) for the duration of one
operation. A non-zero fsuid clears CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_CHOWN,
CAP_FSETID and CAP_MKNOD from the thread's effective set (capabilities(7)), so the kernel checks
mode bits exactly as it does for the sandbox's own processes, and files created meanwhile are
the sandbox uid's without a chown. Going back to fsuid 0 restores them. Path resolution stays
fd-relative (``openat2`` / ``O_NOFOLLOW``, ``runtime.workspace.fs``): no symlink deputy either.

Why not a helper process running as the uid: one more process per request (or a pool) and
bytes copied through a pipe, for the same kernel check. Why not ``access(2)`` before each
operation: a check-then-use race the sandbox can win. Supplementary groups stay the
supervisor's (root's: group 0 only), which grants nothing in a workspace: the sandbox cannot
make a group-0 file.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

from runtime.errors import SandboxError

P = ParamSpec("P")
R = TypeVar("R")
_QUERY = 0xFFFFFFFF  # (uid_t)-1: an invalid id; the call only answers the current one
_state = threading.local()


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _set(fn_name: str, value: int) -> int:
    fn = getattr(_libc(), fn_name)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_uint]
    return int(fn(value)) & 0xFFFFFFFF


def current_fsuid() -> int:
    return _set("setfsuid", _QUERY)


def current_fsgid() -> int:
    return _set("setfsgid", _QUERY)


@contextlib.contextmanager
def acting_as(owner: tuple[int, int] | None) -> Iterator[None]:
    """Run the block with this thread's fsuid/fsgid set to ``owner`` (no-op for ``None`` or
    when already acting: nested workspace calls). ``SandboxError`` if the switch did not
    take (the operation must not run as root by accident)."""
    if owner is None or getattr(_state, "acting", False):
        yield
        return
    uid, gid = owner
    old_gid = _set("setfsgid", gid)
    old_uid = _set("setfsuid", uid)
    try:
        if current_fsuid() != uid or current_fsgid() != gid:
            raise SandboxError("cannot act as the sandbox uid for a file operation")
        _state.acting = True
        yield
    finally:
        _state.acting = False
        _set("setfsuid", old_uid)
        _set("setfsgid", old_gid)


def as_owner(method: Callable[P, R]) -> Callable[P, R]:
    """Decorate a method of an object with an ``owner`` attribute: it runs ``acting_as`` it."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with acting_as(getattr(args[0], "acting", None)):
            return method(*args, **kwargs)

    return wrapper
