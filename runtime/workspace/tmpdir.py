"""A session's ``/tmp`` (the sandbox's HOME): a directory on its disk, beside ``workspace``.

Every call of the session bind-mounts ``<session>/tmp`` at ``/tmp`` (``runtime.sandbox.docker.
spec``), so what a program leaves there (``pip install --user``, caches, dotfiles) is there at
the next call, counts in the session's disk quota (same image) and inherits the disk's
``nosuid,nodev``. It is owned by the workspace's owner (the tenant's sandbox uid), ``0770``,
like ``workspace``. Sessions made before it existed get it on first use (``ensure_tmp``).

The files API names it by absolute paths under ``/tmp/`` (``split_root``); every other path
means what it always meant: workspace-relative, and ``/workspace/...`` stays refused as
absolute.
"""

from __future__ import annotations

import contextlib
import os
from typing import Literal

from runtime.workspace.fs import DIR_FLAGS

TMP = "tmp"
TMP_PREFIX = "/tmp/"
TMP_MODE = 0o770
_NOFOLLOW_DIR = DIR_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC

Root = Literal["workspace", "tmp"]


def ensure_tmp(session_fd: int, workspace_fd: int) -> None:
    """Make ``tmp`` in the session's directory if it is missing, owned like the workspace."""
    try:
        os.close(os.open(TMP, _NOFOLLOW_DIR, dir_fd=session_fd))
        return
    except FileNotFoundError:
        pass
    with contextlib.suppress(FileExistsError):
        os.mkdir(TMP, 0o700, dir_fd=session_fd)
    fd = os.open(TMP, _NOFOLLOW_DIR, dir_fd=session_fd)
    try:
        st = os.fstat(workspace_fd)
        if os.geteuid() == 0:
            os.fchown(fd, st.st_uid, st.st_gid)
        os.fchmod(fd, TMP_MODE)
    finally:
        os.close(fd)


def split_root(path: str) -> tuple[Root, str]:
    """``("tmp", rest)`` for ``/tmp`` and ``/tmp/rest``; ``("workspace", path)`` otherwise
    (unchanged: the workspace's own checks refuse what they refused before)."""
    if path == TMP_PREFIX.rstrip("/") or path == TMP_PREFIX:
        return "tmp", ""
    if path.startswith(TMP_PREFIX):
        return "tmp", path[len(TMP_PREFIX):]
    return "workspace", path


def shown(root: Root, rel: str) -> str:
    """How clients see a path of ``root`` (``/tmp/x`` for the tmp directory's ``x``)."""
    return TMP_PREFIX + rel if root == "tmp" else rel
