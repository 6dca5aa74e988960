"""E2B's paths onto a session's two directories.

Inside an E2B sandbox `/home/user` is the session's workspace (HOME and the default cwd) and
`/tmp` its /tmp; a relative path is relative to `/home/user`, `~` is `/home/user`. Every other
absolute path is not found through the files side (the containers' own system files are not
the session's to read or write). The workspace layer below refuses links, `..` escapes and
names it cannot address, so this only picks the root.
"""

from __future__ import annotations

import posixpath

from runtime.errors import InvalidPath, NotFound
from runtime.workspace.tmpdir import Root

HOME = "/home/user"
TMP = "/tmp"
MAX_PATH = 4096


def resolve(path: str) -> tuple[Root, str]:
    """(root, root-relative path) of an E2B path; the root itself is ''."""
    if len(path) > MAX_PATH or "\x00" in path:
        raise InvalidPath("invalid path")
    if path == "~" or path.startswith("~/"):
        path = HOME + path[1:]
    if not path.startswith("/"):
        path = HOME + "/" + path
    if "/../" in path + "/":
        raise InvalidPath(f"invalid path {path!r}: '..' is not allowed")
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = norm[1:]
    for prefix, root in ((HOME, "workspace"), (TMP, "tmp")):
        if norm == prefix:
            return root, ""  # type: ignore[return-value]
        if norm.startswith(prefix + "/"):
            return root, norm[len(prefix) + 1:]  # type: ignore[return-value]
    raise NotFound(f"{path}: only /home/user (the session's workspace) and /tmp exist "
                   "through the files side")


def shown(root: Root, rel: str) -> str:
    """The absolute E2B path of a root-relative one."""
    base = HOME if root == "workspace" else TMP
    return f"{base}/{rel}" if rel else base
