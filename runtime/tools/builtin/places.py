"""Where a file tool looks: the session's workspace or its /tmp, opened through the
workspace layer (fd-relative, no links, as the sandbox uid) like the files API.

Models write paths many ways; ``""``, ``.``, ``./x``, ``/workspace/x`` and ``x`` all mean
the workspace, ``/tmp/x`` the session's persistent /tmp. Anything else absolute is refused
by the workspace's own path checks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import InvalidInput
from runtime.tools.base import ToolContext
from runtime.workspace.tmpdir import TMP_PREFIX, Root, split_root

if TYPE_CHECKING:
    from runtime.nodes.base import OpenFiles

PATH_HELP = ("workspace-relative (default: the whole workspace), or under /tmp (the "
             "session's /tmp)")


@dataclass(frozen=True)
class Place:
    """Where a tool works: the files of the workspace or of /tmp, and how paths show."""

    files: OpenFiles
    root: Root
    rel: str

    def shown(self, path: str) -> str:
        return TMP_PREFIX + path if self.root == "tmp" else path


@contextlib.asynccontextmanager
async def place(ctx: ToolContext, path: str) -> AsyncIterator[Place]:
    """Open where ``path`` points; closes what it opened."""
    path = path.strip()
    if path in (".", "./", "/workspace", "/workspace/"):
        path = ""
    elif path.startswith("/workspace/"):
        path = path[len("/workspace/"):]
    elif path.startswith("./"):
        path = path[2:]
    root, rel = split_root(path)
    if root == "workspace":
        if ctx.workspace is None:
            raise InvalidInput("this call has no session workspace")
        yield Place(ctx.workspace, root, rel)
        return
    tmp = await asyncio.to_thread(ctx.open_tmp) if ctx.open_tmp is not None else None
    if tmp is None:
        raise InvalidInput("this call has no persistent /tmp")
    try:
        yield Place(tmp, root, rel)
    finally:
        tmp.close()
